"""vLLM v1's paged KV cache, as vLLM 0.33 lays it out (read in vllm/v1/kv_cache_interface.py,
vllm/v1/core/kv_cache_planning.py, kv_cache_utils.py, vllm/platforms/interface.py and mamba_utils.py).

- Every layer gets a page of `block_size` tokens: kv_heads/tp × (head_k + head_v) × dtype per token; MLA keeps one
  576-wide latent, not split by tensor parallel. Constant-state layers get one page holding their state
  (conv keeps d_conv − 1 columns).
- Hybrid attention/state models: the attention block size is raised to a multiple of 16 so that one attention page
  is at least one state page, and state pages are padded up to it.
- Layers with the same spec form buckets; buckets are split into groups of equal layer count (the smallest bucket,
  or the largest when it is < 1.5× the smallest), padding the last group. One block holds one page per layer of a
  group, and all groups draw blocks from one pool: num_blocks = KV budget // (group size × page).
- Blocks a request needs: full ⌈L/block⌉; sliding ⌈min(window − 1 + in-flight, L)/block⌉ + 1; chunked
  ⌈min(chunk + in-flight, L)/block⌉; state 1, or 2 (+1 prefill checkpoint for Mamba2) with prefix caching.
  In-flight tokens = max_num_batched_tokens × 2 with async scheduling (vLLM's default).
- Maximum concurrency = num_blocks / blocks per request at max_model_len; "KV cache size" = that × max_model_len.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from core.dtypes import FP32, CacheDtype, dtype_named
from core.engines.base import CacheAccount, Engine, KindLine
from core.errors import InputError
from core.layers import (
    MLA,
    ChunkedAttention,
    FullAttention,
    GatedDeltaNet,
    LayerKind,
    Mamba2,
    SlidingWindow,
    Storage,
)
from core.model import ModelSpec

KERNEL_BLOCK = 16  # FlashAttention's kernel block (MultipleOf(16)) on Ampere/Hopper
MLA_KERNEL_BLOCK = 128  # TRT-LLM/FlashInfer MLA decode kernels need 128-token alignment in hybrid models
GDN_CHECKPOINT_ALIGNMENT = 64  # FLASHINFER_GDN_CHECKPOINT_ALIGNMENT in vllm/v1/attention/backends/gdn_attn.py


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class VllmOptions:
    platform: str = "cuda"  # "cuda" | "cpu": the CPU backend has its own block sizes and defaults
    block_size: int = 16
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    max_num_batched_tokens: int = 2048  # `vllm serve` default on cards under 70 GiB and on A100
    async_scheduling: bool = True
    prefix_caching: bool = True
    mamba_ssm_cache_dtype: str = "auto"
    # vLLM's "auto" GDN prefill backend is FlashInfer on Hopper, which exports prefill checkpoints aligned to 64
    # tokens; elsewhere (e.g. Ampere) it is Triton, which exports none.
    gdn_flashinfer: bool = False
    num_speculative_tokens: int = 0


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

    @property
    def bytes_per_block(self) -> int:
        return max(self.group_size * self.page_bytes[g.page] for g in self.groups)


@dataclass(frozen=True)
class Capacity:
    num_blocks: int
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int  # what vLLM logs as "GPU KV cache size: N tokens"


@dataclass(frozen=True)
class VllmEngine(Engine):
    options: VllmOptions = VllmOptions()
    name = "vllm"
    kv_dtypes = ("auto", "bf16", "fp16", "fp32", "fp8", "fp8_e4m3", "fp8_e5m2")

    def with_options(self, **changes) -> VllmEngine:
        return replace(self, options=replace(self.options, **changes))

    # --- storage rules -------------------------------------------------------------------------------------------
    def ssm_dtype(self, model: ModelSpec) -> CacheDtype:
        """mamba_ssm_cache_dtype: 'auto' follows the model dtype, except Qwen3.5 (its config's mamba_ssm_dtype)
        and Nemotron-H (float32 unless its config says otherwise)."""
        choice = self.options.mamba_ssm_cache_dtype
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
        return sum(p.per_token for p in self.pages(model, kv_dtype))

    def fixed_bytes_per_sequence(self, model: ModelSpec, kv_dtype: str = "auto") -> int:
        """Per GPU rank, before padding to the attention page."""
        return sum(p.state for p in self.pages(model, kv_dtype))

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
        """The layer's own state tensors (core.layers), each split over tensor parallel along its first axis
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
        return isinstance(part, Mamba2) or (isinstance(part, GatedDeltaNet) and self.options.gdn_flashinfer)

    def pages(self, model: ModelSpec, kv_dtype: str) -> list[Page]:
        storage = self.storage(model, kv_dtype)
        out: list[Page] = []
        for layer in model.layers:
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
                        Page(
                            part.kind,
                            "state",
                            state=self._state_bytes(part, storage),
                            checkpoint=self._checkpoints(part),
                        )
                    )
        return out

    # --- layout --------------------------------------------------------------------------------------------------
    def plan(self, model: ModelSpec, kv_dtype: str = "auto") -> Plan:
        pages = self.pages(model, kv_dtype)
        if not pages:
            raise InputError(f"{model.name} keeps no cache at all; nothing for vLLM to allocate")
        block = self.options.block_size
        attn = [p for p in pages if p.kind != "state"]
        states = [p for p in pages if p.kind == "state"]
        page_bytes: dict[Page, int] = {}
        if attn and states:
            # _align_hybrid_block_size: one attention page must hold the largest state page.
            per_token = max(p.per_token for p in attn)
            state_max = max(p.state for p in states)
            align = max(KERNEL_BLOCK, block)
            if any(p.label == "mla" for p in attn):
                align = max(align, MLA_KERNEL_BLOCK)
            if any(p.checkpoint and p.label == "gated_deltanet" for p in states):
                align = math.lcm(align, GDN_CHECKPOINT_ALIGNMENT)
            needed = align * cdiv(state_max, align * per_token)
            needed = KERNEL_BLOCK * cdiv(needed, KERNEL_BLOCK)
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

        buckets: dict[Page, int] = {}
        for p in pages:
            buckets[p] = buckets.get(p, 0) + 1
        if len(buckets) == 1:
            ((page, count),) = buckets.items()
            return Plan(block, page_bytes, (Group(page, count),), count)
        smallest, largest = min(buckets.values()), max(buckets.values())
        size = largest if largest < smallest * 1.5 else smallest
        groups = []
        for page, count in buckets.items():
            n_groups = cdiv(count, size)
            # layers[i::n_groups]: the first (count mod n_groups) groups get one more layer
            groups += [Group(page, len(range(i, count, n_groups))) for i in range(n_groups)]
        return Plan(block, page_bytes, tuple(groups), size)

    def blocks_for(self, plan: Plan, group: Group, tokens: int, max_model_len: int) -> int:
        page, block = group.page, plan.block_size
        in_flight = self.options.max_num_batched_tokens * (2 if self.options.async_scheduling else 1)
        if page.kind == "full":
            return cdiv(tokens, block)
        if page.kind == "sliding":
            return min(cdiv(tokens, block), cdiv(min(page.window - 1 + in_flight, max_model_len), block) + 1)
        if page.kind == "chunked":
            return min(cdiv(tokens, block), cdiv(min(page.window + in_flight, max_model_len), block))
        spec = self.options.num_speculative_tokens
        if self.options.prefix_caching:
            return 2 + spec + (1 if page.checkpoint else 0)
        return 1 + spec

    def capacity(self, model: ModelSpec, kv_budget: int, max_model_len: int, kv_dtype: str = "auto") -> Capacity:
        """What vLLM's start-up log reports for a KV budget (bytes per GPU) and max_model_len."""
        plan = self.plan(model, kv_dtype)
        num_blocks = kv_budget // plan.bytes_per_block
        per_request = sum(self.blocks_for(plan, g, max_model_len, max_model_len) for g in plan.groups)
        concurrency = num_blocks / per_request
        return Capacity(num_blocks, per_request, concurrency, int(concurrency * max_model_len))

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
