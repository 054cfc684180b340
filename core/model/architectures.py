"""model_type → how each of its layer types is cached. Adding an architecture is one entry in ARCHITECTURES.

Layer types come from the resolved config's `layer_types` (transformers' canonical names: full_attention,
sliding_attention, chunked_attention, linear_attention, conv, hybrid, hybrid_sliding, mlp, moe). An architecture
says what its attention is (GQA or MLA) and what its constant-state layers are (Gated DeltaNet, Mamba, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.errors import InputError
from core.model.config import MAX_WIDTH
from core.model.layers import (
    MLA,
    ChunkedAttention,
    FullAttention,
    GatedDeltaNet,
    Hybrid,
    LayerKind,
    LightningAttention,
    Mamba1,
    Mamba2,
    NoCache,
    ShortConv,
    SlidingWindow,
)

_MAX_TOKENS = 1 << 34
_MAX_FACTOR = 1024.0  # expansions and width multipliers are single digits; NaN and inf fail the range test too


class Cfg:
    """Typed, validated reads from a resolved config dict; every failure names the model_type and the field."""

    def __init__(self, data: dict[str, Any]):
        self.data = data
        self.model_type = str(data.get("model_type", "?"))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def int(self, *keys: str, default: int | None = None, hi: int = MAX_WIDTH) -> int:
        for key in keys:
            value = self.data.get(key)
            if value is None:
                continue
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"{self.model_type} config: {key} must be an integer, got {value!r}")
            if not 0 < value <= hi:
                raise InputError(f"{self.model_type} config: {key}={value} is out of range (1 … {hi:,})")
            return value
        if default is not None:
            return default
        raise InputError(
            f"{self.model_type} config: missing {' or '.join(keys)}; kvscope needs it to size this architecture's cache"
        )

    def num(self, key: str, default: float, hi: float = _MAX_FACTOR) -> float:
        """A positive, finite factor (an expansion or a width multiplier), at most `hi`."""
        value = self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= hi:
            shown = f"{value!r:.40}"
            raise InputError(
                f"{self.model_type} config: {key} must be a number above 0 and at most {hi:g}, got {shown}"
            )
        return float(value)


def head_dim(c: Cfg) -> int:
    if c.has("head_dim"):
        return c.int("head_dim")
    if c.has("attention_head_dim"):
        return c.int("attention_head_dim")
    hidden, heads = c.int("hidden_size"), c.int("num_attention_heads")
    if hidden % heads:
        raise InputError(f"{c.model_type} config: hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    return hidden // heads


def gqa(c: Cfg) -> FullAttention:
    heads = c.int("num_attention_heads")
    kv = c.int("num_key_value_heads", default=heads)
    if kv > heads:
        raise InputError(f"{c.model_type} config: num_key_value_heads {kv} exceeds num_attention_heads {heads}")
    return FullAttention(kv_heads=kv, head_dim=head_dim(c))


def mla(c: Cfg) -> MLA:
    return MLA(kv_lora_rank=c.int("kv_lora_rank"), rope_dim=c.int("qk_rope_head_dim"))


def gated_deltanet(c: Cfg) -> GatedDeltaNet:
    return GatedDeltaNet(
        num_k_heads=c.int("linear_num_key_heads"),
        k_head_dim=c.int("linear_key_head_dim"),
        num_v_heads=c.int("linear_num_value_heads"),
        v_head_dim=c.int("linear_value_head_dim"),
        conv_kernel=c.int("linear_conv_kernel_dim"),
    )


def mamba1(c: Cfg) -> Mamba1:
    return Mamba1(c.int("intermediate_size"), c.int("state_size"), c.int("conv_kernel"))


def jamba_mamba(c: Cfg) -> Mamba1:
    return Mamba1(c.int("mamba_expand") * c.int("hidden_size"), c.int("mamba_d_state"), c.int("mamba_d_conv"))


def _expanded(c: Cfg, key: str) -> int:
    return int(c.num(key, 2) * c.int("hidden_size"))


def mamba2(c: Cfg) -> Mamba2:
    return Mamba2(
        c.int("num_heads"),
        c.int("head_dim"),
        c.int("state_size"),
        c.int("n_groups"),
        c.int("conv_kernel"),
        intermediate=_expanded(c, "expand"),
    )


def mamba2_prefixed(c: Cfg) -> Mamba2:
    """Falcon-H1 and Granite-4.0-H name their Mamba2 fields mamba_*; Falcon-H1 may set the inner width directly."""
    inner = c.int("mamba_d_ssm") if c.has("mamba_d_ssm") else _expanded(c, "mamba_expand")
    return Mamba2(
        c.int("mamba_n_heads"),
        c.int("mamba_d_head"),
        c.int("mamba_d_state"),
        c.int("mamba_n_groups"),
        c.int("mamba_d_conv"),
        intermediate=inner,
    )


def nemotron_mamba(c: Cfg) -> Mamba2:
    heads, dim = c.int("mamba_num_heads"), c.int("mamba_head_dim")
    return Mamba2(
        heads, dim, c.int("ssm_state_size"), c.int("n_groups"), c.int("conv_kernel"), intermediate=heads * dim
    )


def zamba2_mamba(c: Cfg) -> Mamba2:
    return Mamba2(
        c.int("n_mamba_heads"),
        c.int("mamba_headdim"),
        c.int("mamba_d_state"),
        c.int("mamba_ngroups"),
        c.int("mamba_d_conv"),
        intermediate=_expanded(c, "mamba_expand"),
    )


def short_conv(c: Cfg) -> ShortConv:
    return ShortConv(hidden=c.int("hidden_size"), l_cache=c.int("conv_L_cache"))


def lightning(c: Cfg) -> LightningAttention:
    return LightningAttention(heads=c.int("num_attention_heads"), head_dim=head_dim(c))


@dataclass(frozen=True)
class Arch:
    """An architecture: its attention and, for hybrids and SSMs, its constant-state layer."""

    attention: Callable[[Cfg], LayerKind] = gqa
    state: Callable[[Cfg], LayerKind] | None = None


DENSE = Arch()
# plain and sliding-window attention (which layers slide comes from layer_types / sliding_window)
DENSE_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "gpt_oss",
    "llama4",
    "llama4_text",
    "olmo2",
    "olmo3",
    "granite",
    "cohere2",
)
ARCHITECTURES: dict[str, Arch] = {
    **dict.fromkeys(DENSE_TYPES, DENSE),
    **dict.fromkeys(["deepseek_v2", "deepseek_v3", "kimi_k2"], Arch(attention=mla)),
    **dict.fromkeys(
        ["qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next"], Arch(state=gated_deltanet)
    ),
    **dict.fromkeys(["mamba", "falcon_mamba"], Arch(state=mamba1)),
    "jamba": Arch(state=jamba_mamba),
    "mamba2": Arch(state=mamba2),
    "falcon_h1": Arch(state=mamba2_prefixed),
    "granitemoehybrid": Arch(state=mamba2_prefixed),
    "nemotron_h": Arch(state=nemotron_mamba),
    "zamba2": Arch(state=zamba2_mamba),
    **dict.fromkeys(["lfm2", "lfm2_moe"], Arch(state=short_conv)),
    "minimax": Arch(state=lightning),
}


def _windowed(base: LayerKind, c: Cfg, layer_type: str) -> LayerKind:
    if not isinstance(base, FullAttention):
        raise InputError(f"{c.model_type}: {layer_type} layers on {base.kind} attention are not supported")
    if layer_type.endswith("sliding") or layer_type == "sliding_attention":
        window = c.int("sliding_window", hi=_MAX_TOKENS)
        return SlidingWindow(base.kv_heads, base.head_dim, base.v_head_dim, window=window)
    return ChunkedAttention(
        base.kv_heads, base.head_dim, base.v_head_dim, chunk=c.int("attention_chunk_size", hi=_MAX_TOKENS)
    )


_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts")


def check_experts(c: Cfg) -> None:
    """A mixture of experts routes each token to num_experts_per_tok of its experts: never more than it has."""
    experts = [n for n in map(c.data.get, _EXPERT_COUNTS) if isinstance(n, int) and not isinstance(n, bool) and n > 0]
    if not experts or not c.has("num_experts_per_tok"):
        return
    top_k = c.int("num_experts_per_tok")
    if top_k > max(experts):
        raise InputError(
            f"{c.model_type} config: num_experts_per_tok={top_k} is more than the {max(experts)} experts it has; "
            "each token is routed to some of the experts, never more than all of them"
        )


def build_layers(cfg: dict[str, Any]) -> tuple[LayerKind, ...]:
    """One LayerKind per decoder layer, from a resolved config."""
    c = Cfg(cfg)
    check_experts(c)
    arch = ARCHITECTURES.get(c.model_type) or ARCHITECTURES.get(str(cfg.get("_top_model_type")))
    if arch is None:
        raise InputError(
            f"model_type {c.model_type!r} is not in kvscope's architecture table, so its cache layout is unknown; "
            "supported: " + ", ".join(sorted(ARCHITECTURES))
        )
    layer_types = cfg.get("layer_types")
    n = c.int("num_hidden_layers", hi=100_000)
    if not isinstance(layer_types, list) or len(layer_types) != n:
        raise InputError(
            f"{c.model_type} config: layer_types must list one type per layer ({n}), got {layer_types!r:.80}"
        )
    memo: dict[str, LayerKind] = {}

    def kind_of(layer_type: str) -> LayerKind:
        if layer_type in memo:
            return memo[layer_type]
        if layer_type == "full_attention":
            kind = arch.attention(c)
        elif layer_type in ("sliding_attention", "chunked_attention"):
            kind = _windowed(arch.attention(c), c, layer_type)
        elif layer_type in ("linear_attention", "conv", "mamba"):
            if arch.state is None:
                raise InputError(f"{c.model_type}: layer type {layer_type!r} needs a state kind kvscope lacks")
            kind = arch.state(c)
        elif layer_type in ("hybrid", "hybrid_sliding"):
            attention = kind_of("sliding_attention" if layer_type == "hybrid_sliding" else "full_attention")
            kind = Hybrid((attention, kind_of("linear_attention")))
        elif layer_type in ("mlp", "moe", "dummy"):
            kind = NoCache()
        else:
            raise InputError(f"{c.model_type}: unknown layer type {layer_type!r} in layer_types")
        memo[layer_type] = kind
        return kind

    return tuple(kind_of(str(t)) for t in layer_types)
