"""Layer kinds: what each kind of decoder layer keeps between tokens, and how many bytes that is.

Each kind knows three numbers, the way vLLM's KV-cache spec classes do: bytes per cached token, bytes fixed per
sequence, and the most tokens it ever holds (its cap). The dtypes and the conv width come from the engine's
`Storage` rules, so one layer description serves every engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from core.dtypes import CacheDtype


@dataclass(frozen=True)
class Storage:
    """An engine's storage rules for one run: the dtype of each role and how many conv columns it keeps."""

    kv: CacheDtype  # attention keys/values and MLA latents
    conv: CacheDtype  # causal-conv input windows (Mamba, Gated DeltaNet, short conv)
    ssm: CacheDtype  # recurrent/SSM states (Mamba1/2, Gated DeltaNet)
    linear: CacheDtype  # lightning-attention KV state (MiniMax)
    conv_columns_dropped: int = 0  # transformers keeps all d_conv columns; vLLM and llama.cpp keep d_conv - 1


@dataclass(frozen=True)
class StateTensor:
    """One fixed-size tensor of a layer, per sequence: its role picks its dtype."""

    name: str
    role: str  # "conv" | "ssm" | "linear"
    shape: tuple[int, ...]

    def bytes(self, storage: Storage) -> int:
        dtype: CacheDtype = getattr(storage, self.role)
        *lead, last = self.shape
        if self.role == "conv":
            last -= storage.conv_columns_dropped
        rows = 1
        for dim in lead:
            rows *= dim
        # Conv windows are stored channel-major ([channels, width]); each channel row is its own block run.
        return rows * dtype.bytes_for(last)


class LayerKind:
    """Base of every layer kind. Subclasses are frozen dataclasses."""

    kind: ClassVar[str]
    grows: ClassVar[bool] = False  # holds a per-token cache
    # llama.cpp updates its state with a chain of small kernels, not one fused op (Mamba's ssm_scan, a short conv's
    # ssm_conv): what core.speed's Efficiency.overhead_recurrent_s is paid per pass for
    chained_update: ClassVar[bool] = False

    @property
    def token_cap(self) -> int | None:
        """Most tokens this layer's per-token cache holds in the model's own terms (window/chunk); None = unbounded."""
        return None

    def token_rows(self) -> tuple[int, ...]:
        """Elements per cached token, one entry per stored row (e.g. K and V)."""
        return ()

    def bytes_per_token(self, storage: Storage) -> int:
        return sum(storage.kv.bytes_for(row) for row in self.token_rows())

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return ()

    def fixed_bytes(self, storage: Storage) -> int:
        """Bytes held per sequence whatever its length."""
        return sum(t.bytes(storage) for t in self.state_tensors())

    def parts(self) -> tuple[LayerKind, ...]:
        """The kinds this layer is made of (itself, unless it is a hybrid)."""
        return (self,)


@dataclass(frozen=True)
class NoCache(LayerKind):
    """MLP/MoE-only blocks (Nemotron-H): nothing kept."""

    kind: ClassVar[str] = "no_cache"


@dataclass(frozen=True)
class FullAttention(LayerKind):
    """GQA/MHA attention: K and V rows of kv_heads × head_dim per token."""

    kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    kind: ClassVar[str] = "full_attention"
    grows: ClassVar[bool] = True

    def token_rows(self) -> tuple[int, ...]:
        return (self.kv_heads * self.head_dim, self.kv_heads * (self.v_head_dim or self.head_dim))


@dataclass(frozen=True)
class SlidingWindow(FullAttention):
    """Attention over the last `window` tokens (Mistral, Gemma 2/3, gpt-oss)."""

    window: int = 0
    kind: ClassVar[str] = "sliding_window"

    @property
    def token_cap(self) -> int | None:
        return self.window


@dataclass(frozen=True)
class ChunkedAttention(FullAttention):
    """Attention within fixed chunks (Llama 4); caches like a window of `chunk` tokens."""

    chunk: int = 0
    kind: ClassVar[str] = "chunked_attention"

    @property
    def token_cap(self) -> int | None:
        return self.chunk


@dataclass(frozen=True)
class MLA(LayerKind):
    """Multi-head latent attention (DeepSeek V2/V3): one compressed latent plus the shared rope key per token."""

    kv_lora_rank: int
    rope_dim: int
    kind: ClassVar[str] = "mla"
    grows: ClassVar[bool] = True

    def token_rows(self) -> tuple[int, ...]:
        return (self.kv_lora_rank + self.rope_dim,)


@dataclass(frozen=True)
class GatedDeltaNet(LayerKind):
    """Gated DeltaNet (Qwen3.5, Qwen3-Next): conv over q,k,v channels plus a (nv, dk, dv) recurrent state."""

    num_k_heads: int
    k_head_dim: int
    num_v_heads: int
    v_head_dim: int
    conv_kernel: int
    kind: ClassVar[str] = "gated_deltanet"
    # llama.cpp's layer is many small ops (src/models/delta-net-base.cpp; qwen3next's decode graph: 6,242 nodes for
    # 48 layers, PR #19504), the recurrence alone 23 before the fused GATED_DELTA_NET op (PR #20091)
    chained_update: ClassVar[bool] = True

    def state_tensors(self) -> tuple[StateTensor, ...]:
        channels = 2 * self.num_k_heads * self.k_head_dim + self.num_v_heads * self.v_head_dim
        return (
            StateTensor("conv", "conv", (channels, self.conv_kernel)),
            StateTensor("recurrent", "ssm", (self.num_v_heads, self.k_head_dim, self.v_head_dim)),
        )


@dataclass(frozen=True)
class Mamba1(LayerKind):
    """Mamba (selective scan): conv over the inner width plus an (inner, d_state) SSM state."""

    intermediate: int
    d_state: int
    d_conv: int
    kind: ClassVar[str] = "mamba1"

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (
            StateTensor("conv", "conv", (self.intermediate, self.d_conv)),
            StateTensor("ssm", "ssm", (self.intermediate, self.d_state)),
        )


@dataclass(frozen=True)
class Mamba2(LayerKind):
    """Mamba2 (SSD): conv over x, B and C channels plus an (heads, head_dim, d_state) SSM state.

    `intermediate` is the x width the conv sees; models derive it differently (expand × hidden, d_ssm, heads × dim).
    """

    heads: int
    head_dim: int
    d_state: int
    n_groups: int
    d_conv: int
    intermediate: int
    kind: ClassVar[str] = "mamba2"

    def state_tensors(self) -> tuple[StateTensor, ...]:
        channels = self.intermediate + 2 * self.n_groups * self.d_state
        return (
            StateTensor("conv", "conv", (channels, self.d_conv)),
            StateTensor("ssm", "ssm", (self.heads, self.head_dim, self.d_state)),
        )


@dataclass(frozen=True)
class ShortConv(LayerKind):
    """LFM2's gated short convolution: only a (hidden, L_cache) conv window."""

    hidden: int
    l_cache: int
    kind: ClassVar[str] = "short_conv"

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (StateTensor("conv", "conv", (self.hidden, self.l_cache)),)


@dataclass(frozen=True)
class LightningAttention(LayerKind):
    """MiniMax lightning (linear) attention: a (heads, head_dim, head_dim) KV state."""

    heads: int
    head_dim: int
    kind: ClassVar[str] = "lightning_attention"

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return (StateTensor("kv_state", "linear", (self.heads, self.head_dim, self.head_dim)),)


@dataclass(frozen=True)
class Hybrid(LayerKind):
    """One layer holding several caches at once (Falcon-H1: attention beside Mamba2; Zamba2's shared attention)."""

    members: tuple[LayerKind, ...]
    kind: ClassVar[str] = "hybrid"

    @property
    def grows(self) -> bool:  # type: ignore[override]
        return any(m.grows for m in self.members)

    @property
    def token_cap(self) -> int | None:
        caps = [m.token_cap for m in self.members if m.grows]
        return None if not caps or None in caps else max(c for c in caps if c is not None)

    def token_rows(self) -> tuple[int, ...]:
        return tuple(row for m in self.members for row in m.token_rows())

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return tuple(t for m in self.members for t in m.state_tensors())

    def parts(self) -> tuple[LayerKind, ...]:
        return self.members
