"""Does a model fit a card, how long a context, how many requests: the way each engine decides it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from core.dtypes import dtype_named
from core.engines import Engine
from core.engines.base import CacheAccount, per_count, sized_tensors, sized_weights
from core.engines.hf_transformers import TransformersEngine
from core.engines.llamacpp import LlamaCppEngine, Offload, as_llamacpp_sees, windows_dropped
from core.engines.vllm_cluster import Layout, rank_weights
from core.engines.vllm_engine import NEEDS_CC, ON_APPLE, Capacity, VllmEngine
from core.engines.vllm_mxfp4 import Kernel, kernel_for, loading_growth
from core.engines.vllm_pipeline import fullest_stage_fraction, pipeline_capacity
from core.errors import InputError
from core.memory.gpus import Card
from core.memory.llamacpp_compute import PIPELINE_COPIES, PIPELINE_ITEM, llamacpp_overhead
from core.memory.overhead import PER_SEQUENCE, Item, transformers_overhead, vllm_overhead
from core.memory.quant import STORED_FTYPE, as_gguf, default_format, format_named
from core.memory.weightfiles import WeightFile
from core.model.params import ParamCount, count_params
from core.model.spec import ModelSpec
from core.units import format_bytes, format_tokens, layer_span

TABLE_CONTEXTS = tuple(1 << k for k in range(12, 24))  # 4K … 8M, cut at the model's max
SSM_CONTEXT_LIMIT = 1 << 24  # pure state-space models have no position limit; search stops here


@dataclass(frozen=True)
class Setup:
    model: ModelSpec
    engine: Engine
    card: Card
    gpus: int = 1
    tp: int = 1
    pp: int = 1
    weights: str | None = None  # quantisation format; None = the checkpoint's own
    kv_dtype: str = "auto"
    gpu_memory_utilization: float = 0.92  # vLLM's default in 0.33
    kv_cache_memory_bytes: int | None = None  # vLLM: sets the KV budget directly
    max_model_len: int | None = None  # vLLM: defaults to the model's max
    weights_file: WeightFile | None = None  # exact sizes from a real checkpoint replace the estimate
    gpu_layers: int | None = None  # llama.cpp -ngl: layers on the GPU (None = all); the rest stay in system RAM
    cpu_experts: range = range(0)  # llama.cpp: layers whose routed experts stay in system RAM (--n-cpu-moe N: range(N))


@dataclass(frozen=True)
class Row:
    context: int
    cache_bytes: int  # per GPU, one sequence
    weights_bytes: int
    overhead_bytes: int
    total_bytes: int
    headroom_bytes: int
    fits: bool
    max_concurrency: float
    account: CacheAccount = field(repr=False, compare=False)
    overhead: tuple[Item, ...] = field(default=(), repr=False, compare=False)
    gpu: str = ""  # llama.cpp over several GPUs: which one these figures are (Solver.fullest)
    # llama.cpp over several GPUs: the GPU with the least left beside one sequence, where it is another than `gpu`
    # (Solver.tightest), and what it has left
    tightest: str = ""
    tightest_headroom_bytes: int = 0
    slots: int = 0  # llama.cpp's unified cache: the front end's slots, where they and not memory bound the requests
    # llama.cpp's unified cache: the -c (cells of every request together) that max_concurrency requests need; the
    # row's own figures are one request's, -c context
    n_ctx: int = 0
    # vLLM: --max-num-seqs where it, not memory, bounds the requests its scheduler runs at once (max_concurrency
    # stays the cache's, as vLLM logs it)
    max_num_seqs: int = 0
    # llama.cpp: the sequences its front end runs at once (Ollama's OLLAMA_NUM_PARALLEL, llama-cli's one), where the
    # memory holds more; max_concurrency is then what that many slots would hold
    front_end_runs: int = 0


@dataclass(frozen=True)
class Fit:
    setup: Setup
    weights_format: str
    weights_bytes: int  # per GPU
    usable_bytes: int  # per GPU: the card, times gpu_memory_utilization for vLLM
    kv_budget_bytes: int  # per GPU, at the first table context for engines whose overhead grows with context
    overhead_bytes: int
    max_context: int
    context_limit: int
    rows: tuple[Row, ...]
    vllm: Capacity | None = None
    notes: tuple[str, ...] = ()
    # the engine as the figures use it: under vLLM, `vllm serve`'s defaults for the card and the parallel sizes
    # (Solver.engine), which setup.engine, as given, lacks
    engine: Engine | None = None


def cache_in_ram(fit: Fit, row: Row) -> bool:
    """llama.cpp with every decoder layer left in system RAM (-ngl 0, or 1: only the output layer offloaded): the
    GPU holds none of the cache, and the host's RAM, which kvscope does not size, bounds the requests."""
    return isinstance(fit.setup.engine, LlamaCppEngine) and not row.account.lines


def flag_notes(setup: Setup) -> list[str]:
    """What llama.cpp does other than its flags or the config say: an -ub past -b, --n-cpu-moe on a model without
    routed experts, sliding windows its loader does not build (fit's notes and speed's)."""
    if not isinstance(setup.engine, LlamaCppEngine):
        return []
    notes = [setup.engine.ubatch_note(), windows_dropped(setup.model)]
    if setup.cpu_experts and not count_params(setup.model).experts:
        notes.append(f"--n-cpu-moe changes nothing here: {setup.model.name} has no routed experts")
    return [n for n in notes if n]


def layer_bytes(count: ParamCount, fmt: str, dtype_bytes: int) -> tuple[list[int], list[int], int]:
    """Per decoder layer, the bytes of its tensors but routed experts and those of its routed experts; and the bytes
    of the output layer (final norm and head). With tied embeddings llama.cpp loads the token embedding a second
    time as the head, on the output layer's device (create_tensor(TOKEN_EMBD, TENSOR_DUPLICATED) in
    src/models/*.cpp), so the head then costs the embedding's bytes. Once per count and format."""

    def build() -> tuple[list[int], list[int], int]:
        sized = sized_tensors(count, fmt, dtype_bytes)
        n = 1 + max((t.layer for t, _ in sized if t.layer is not None), default=-1)
        dense, routed, output, embedding = [0] * n, [0] * n, 0, 0
        for tensor, size in sized:
            if tensor.layer is not None:
                (routed if tensor.routed else dense)[tensor.layer] += size
            elif tensor.category == "embedding":
                embedding += size
            else:
                output += size
        tied = not any(t.role == "output" for t, _ in sized)
        return dense, routed, output + (embedding if tied else 0)

    return per_count(count, ("layer_bytes", fmt, dtype_bytes), build)


@dataclass(frozen=True)
class GpuShare:
    """What one GPU holds of a model llama.cpp runs: its part of the layers (Offload.split over several GPUs), the
    model of those layers whose cache it holds, and their weights."""

    index: int
    where: Offload
    model: ModelSpec
    weights: int

    def label(self, gpus: int) -> str:
        layers = self.where.layers
        held = layer_span(layers.start, layers.stop - 1) if layers else "no decoder layer"
        return f"GPU {self.index} of {gpus} ({held}{' and the output layer' if self.where.output else ''})"


def setup_format(setup: Setup) -> str:
    """The weight format the setup sizes: the one asked for, else the checkpoint's; as a GGUF on llama.cpp; the
    checkpoint's for a GGUF type on transformers, which dequantises GGUF weights when it loads them."""
    if not setup.weights:
        return own_format(setup.model, setup.engine)
    fmt = setup.weights
    if isinstance(setup.engine, TransformersEngine) and format_named(fmt).gguf is not None:
        return default_format(setup.model)
    return as_gguf(fmt) if isinstance(setup.engine, LlamaCppEngine) else fmt


# checkpoint formats llama.cpp's converter dequantizes to its --outtype (auto: the 16-bit dtype) by default
# (conversion/base.py dequant_model: fp8 with or without blocks, gptq, compressed-tensors int)
CONVERTER_DEQUANTIZES = frozenset({"fp8", "fp8_block", "gptq", "gptq_int8", "int8"})


def own_format(model: ModelSpec, engine: Engine) -> str:
    """The checkpoint's own format as the engine loads it. On llama.cpp: the GGUF its converter writes by default,
    the checkpoint's type where GGUF has it, else its 16-bit dtype: gpt-oss's experts stay MXFP4 and the rest 16-bit
    (llama-bench: gpt-oss-20b "F16", 13,779,630,336 B), an fp8 or GPTQ checkpoint is dequantized."""
    fmt = default_format(model)
    if not isinstance(engine, LlamaCppEngine):
        return fmt
    if count_params(model).stored or fmt in CONVERTER_DEQUANTIZES:
        return as_gguf(dtype_named(model.dtype).name)
    return as_gguf(fmt)


def on_gpus(setup: Setup, gpus: int) -> Setup:
    """The setup on `gpus` GPUs, split the engine's own way (default_split). Under vLLM, where tensor parallel over
    all of them cannot divide the model's heads (32 heads on 3 GPUs), the largest tensor parallel that can, with
    pipeline stages for the rest (as `vllm serve` must be told: 3 GPUs run TP 1 × PP 3)."""
    tp, pp = default_split(setup.engine, gpus)
    whole = replace(setup, gpus=gpus, tp=tp, pp=pp)
    if not isinstance(setup.engine, VllmEngine) or gpus == 1:
        return whole
    for tp in (t for t in range(gpus, 0, -1) if gpus % t == 0):
        split = replace(whole, tp=tp, pp=gpus // tp)
        try:
            validate(split)
        except InputError:
            continue
        return split
    return whole  # no split runs it: the whole TP's error says why


def default_split(engine: Engine, gpus: int, tp: int | None = None, pp: int | None = None) -> tuple[int, int]:
    """vLLM shards heads over GPUs (tensor parallel); transformers and llama.cpp split layers (pipeline-like)."""
    if tp is None and pp is None:
        return (gpus, 1) if isinstance(engine, VllmEngine) else (1, gpus)
    return tp or max(1, gpus // (pp or 1)), pp or max(1, gpus // (tp or 1))


def validate(setup: Setup) -> None:
    """Refuse a setup no engine could run, whatever the card: the split, the limits of each option."""
    if setup.gpus < 1 or setup.tp < 1 or setup.pp < 1:
        raise InputError("GPU count, tensor parallel and pipeline parallel must be at least 1")
    if setup.tp * setup.pp != setup.gpus:
        raise InputError(
            f"tensor parallel {setup.tp} × pipeline parallel {setup.pp} must equal the GPU count {setup.gpus}"
        )
    if setup.tp > 1 and not isinstance(setup.engine, VllmEngine):
        raise InputError(
            f"{setup.engine.name} splits layers across GPUs, not heads (tensor parallel {setup.tp}): each GPU is a "
            f"pipeline stage, so leave --tp and --pp out, or give --pp {setup.gpus}"
        )
    heads = setup.model.config.get("num_attention_heads")
    if isinstance(heads, int) and heads % setup.tp:
        raise InputError(f"tensor parallel {setup.tp} does not divide the {heads} attention heads")
    if not 0 < setup.gpu_memory_utilization <= 1:
        raise InputError(f"gpu_memory_utilization must be in (0, 1], got {setup.gpu_memory_utilization}")
    if setup.kv_cache_memory_bytes is not None and setup.kv_cache_memory_bytes <= 0:
        raise InputError("kv_cache_memory_bytes must be positive")
    if setup.gpu_layers is not None:
        if not isinstance(setup.engine, LlamaCppEngine):
            raise InputError("partial offload (-ngl / gpu_layers) is a llama.cpp setting; choose --engine llama.cpp")
        if setup.gpu_layers < 0:
            raise InputError(f"-ngl (--n-gpu-layers) must be 0 or more, got {setup.gpu_layers}")
    if setup.cpu_experts:
        if not isinstance(setup.engine, LlamaCppEngine):
            raise InputError("--n-cpu-moe is a llama.cpp setting; choose --engine llama.cpp")
        if setup.cpu_experts.start < 0 or setup.cpu_experts.step != 1:
            raise InputError(f"experts in RAM must be a run of layers from 0 up, got {setup.cpu_experts}")
    if setup.pp > len(setup.model.layers):
        n = len(setup.model.layers)
        if isinstance(setup.engine, VllmEngine):
            raise InputError(f"pipeline parallel {setup.pp} exceeds the model's {n} layers")
        raise InputError(
            f"the model's {n} layers cannot fill {setup.pp} GPUs: each GPU holds at least one; ask for {n} or fewer"
        )


def context_limit(setup: Setup) -> int:
    model_max = setup.model.max_context
    if setup.max_model_len is not None:
        if setup.max_model_len <= 0:
            raise InputError("max_model_len must be positive")
        if model_max and setup.max_model_len > model_max:
            raise InputError(
                f"max_model_len {setup.max_model_len:,} is above {setup.model.name}'s maximum context {model_max:,}"
            )
        return setup.max_model_len
    return model_max or SSM_CONTEXT_LIMIT


class Solver:
    """All per-GPU arithmetic for one Setup."""

    def __init__(self, setup: Setup):
        validate(setup)
        self.setup = setup
        engine = setup.engine
        if isinstance(engine, VllmEngine):
            # `vllm serve`'s batch defaults for the card, as on the cluster page
            engine = engine.served_on(setup.card).with_options(
                tensor_parallel=setup.tp, pipeline_parallel=setup.pp, gdn_flashinfer=setup.card.hopper
            )
        self.engine = engine
        self.format = setup_format(setup)
        self.kernel: Kernel | None = None
        self.offload: Offload | None = None  # llama.cpp: where -ngl and --n-cpu-moe put the model
        self.shares: tuple[GpuShare, ...] = ()  # llama.cpp: each GPU's part (one per GPU)
        self._fullest_at: dict[int, GpuShare] = {}
        self._room_at: dict[tuple[int, int], tuple[float, int]] = {}
        self._pipelined_at: dict[int, bool] = {}
        self._copies_at: dict[tuple[int, int], int] = {}
        self.cpu_weight = 0  # llama.cpp: the largest weight tensor left in RAM that op_offload copies to the GPU
        self.relaid = 0  # bytes vLLM's MoE kernel layout adds to the checkpoint's MXFP4 experts
        count = count_params(setup.model)
        dtype_bytes = dtype_named(setup.model.dtype).block_bytes
        self.model = setup.model  # the part of the model whose cache lives on the GPUs
        if setup.weights_file is not None:
            self.format = f"{setup.weights_file.kind} file"
            self.weights_total = setup.weights_file.total_bytes
        else:
            self.weights_total = sized_weights(count, self.format, dtype_bytes).total
            if isinstance(engine, VllmEngine) and self.format == "mxfp4":
                self.kernel = kernel_for(setup.card, engine.options.platform)
                self.relaid = loading_growth(setup.model.config, self.kernel)
                self.weights_total += self.relaid
        self.weights = -(-self.weights_total // setup.gpus)
        # vLLM over several GPUs: each rank's weights as vLLM shards them (norms, routers and MLA's down-projections
        # whole on every TP rank, the embedding on the first stage, the head on the last), as the cluster plan does
        self.stage_weights: tuple[int, ...] = ()
        if isinstance(engine, VllmEngine) and setup.weights_file is None and setup.gpus > 1:
            layout, platform = Layout(tp=setup.tp, pp=setup.pp), engine.options.platform
            self.stage_weights = rank_weights(setup.model, layout, self.format, setup.card, platform).total
            self.weights = max(self.stage_weights)
        if isinstance(engine, LlamaCppEngine):
            self.shares = self._llamacpp_shares(count, dtype_bytes)
            self.weights_total = sum(share.weights for share in self.shares)
            self.weights = max(share.weights for share in self.shares)
            assert self.offload is not None
            self.model = self._on_gpu(self.offload.layers, "on GPU")
        util = setup.gpu_memory_utilization if isinstance(engine, VllmEngine) else 1.0
        self.usable = int(setup.card.memory_bytes * util)
        self.limit = context_limit(setup)

    def _llamacpp_shares(self, count: ParamCount, dtype_bytes: int) -> tuple[GpuShare, ...]:
        """llama.cpp keeps the token embedding in system RAM and puts the layers -ngl selects (the last ones, and the
        output layer: core.engines.llamacpp.Offload) on the GPUs, split by layers, each layer's cache beside it."""
        layers = self.setup.model.layers
        assert isinstance(self.engine, LlamaCppEngine)
        where = self.offload = self.engine.offload(self.setup.gpu_layers, len(layers), self.setup.cpu_experts)
        file = self.setup.weights_file
        if file is not None:
            if where.cpu_experts:
                raise InputError("--n-cpu-moe with a weights file is not modelled: its tensors carry no expert roles")

            def weights(part: Offload) -> int:
                return file.bytes_on_gpu(part.layers, part.output)

        else:
            dense, routed, output = layer_bytes(count, self.format, dtype_bytes)

            def weights(part: Offload) -> int:
                kept = (dense[i] + (0 if i in part.cpu_experts else routed[i]) for i in part.layers if i < len(dense))
                return sum(kept) + (output if part.output else 0)

            # a layer's three FFN (or expert) matrices are its largest tensors: a third of its bytes bounds one
            self.cpu_weight = max(
                [routed[i] // 3 for i in where.cpu_experts]
                + [max(dense[i], routed[i]) // 3 for i in where.on_cpu if i < len(dense)],
                default=0,
            )
        parts = where.split(self.setup.gpus) if self.setup.gpus > 1 else (where,)
        return tuple(
            GpuShare(d, part, self._on_gpu(part.layers, f"on GPU {d}" if len(parts) > 1 else "on GPU"), weights(part))
            for d, part in enumerate(parts)
        )

    def _on_gpu(self, kept: range, where: str) -> ModelSpec:
        """The model of the decoder layers in `kept`, whose cache lives with them: a run of the layers as llama.cpp
        sees the whole model (Gemma 3's every sixth layer global counts from the whole model's first)."""
        model = self.setup.model
        if len(kept) == len(model.layers):
            return model  # every layer (the same spec, its layer census kept)
        name = f"{model.name} ({len(kept)} of {len(model.layers)} layers {where})"
        seen = as_llamacpp_sees(model).layers
        return model.with_layers(tuple(seen[i] for i in kept), name=name, first_layer=kept.start)

    # cache is split across pipeline stages (layers) and, for vLLM, across TP ranks inside the engine's pages
    def _layer_split(self) -> int:
        return self.setup.pp

    def _account(self, model: ModelSpec, context: int, sequences: int = 1) -> CacheAccount:
        if not model.layers:  # no layer on this GPU: no cache, in the type the engine would keep
            kv = self.engine.kv_dtype(self.setup.model, self.setup.kv_dtype).name
            return CacheAccount(model.name, self.engine.name, kv, context, sequences, ())
        return self.engine.account(model, context, sequences, self.setup.kv_dtype)

    def _llamacpp_overhead(self, share: GpuShare, context: int, sequences: int, copies: int = 1) -> tuple[Item, ...]:
        assert isinstance(self.engine, LlamaCppEngine)
        # op_offload copies a weight left in RAM to the first GPU that runs the op: GPU 0 (ggml-backend.cpp 1.off)
        copied = self.cpu_weight if share.index == 0 else 0
        outputs = self.engine.options.n_outputs_max
        model, where = self.setup.model, share.where
        return tuple(llamacpp_overhead(self.engine, model, context, sequences, where, copied, outputs, copies))

    def pipelined(self, context: int) -> bool:
        """Whether llama.cpp runs one sequence of `context` with pipeline parallelism (several GPUs, Offload.pipelines)
        and its copies fit on every GPU: otherwise sched_reserve retries without them."""
        if len(self.shares) < 2 or self.offload is None or not self.offload.pipelines:
            return False
        if context not in self._pipelined_at:
            # the room left beside one sequence holds the copies on every GPU
            self._pipelined_at[context] = all(
                self._room(share, context)[1] >= self._copies(share, context) for share in self.shares
            )
        return self._pipelined_at[context]

    def _copies(self, share: GpuShare, context: int) -> int:
        """The pipeline copies' bytes on a GPU (the overhead item four copies add to one); once per share and
        context."""
        key = (share.index, context)
        if key not in self._copies_at:
            items = self._llamacpp_overhead(share, context, 1, PIPELINE_COPIES)
            self._copies_at[key] = sum(i.bytes for i in items if i.label == PIPELINE_ITEM)
        return self._copies_at[key]

    def _room(self, share: GpuShare, context: int) -> tuple[float, int]:
        """The sequences of `context` tokens whose cache fits beside the share's weights and overhead (one copy of
        the inputs), and the room left with one of them; once per share and context."""
        key = (share.index, context)
        if key not in self._room_at:
            budget = self.usable - share.weights - sum(i.bytes for i in self._llamacpp_overhead(share, context, 1))
            per_sequence = self._account(share.model, context).total
            if not per_sequence:
                fits: float = float("inf")
            elif self.unified:
                fits = self._shared(share, context) if budget >= per_sequence else 0
            else:
                fits = max(0, budget) // per_sequence
            self._room_at[key] = fits, budget - per_sequence
        return self._room_at[key]

    @property
    def unified(self) -> bool:
        """llama.cpp with a unified cache (--kv-unified; llama-server's default): its sequences share one stream."""
        return isinstance(self.engine, LlamaCppEngine) and self.engine.options.kv_unified

    def _shared(self, share: GpuShare, context: int) -> int:
        """A unified cache (--kv-unified; llama-server's default): n sequences share one stream of pad(n × context)
        cells, with a window (and a recurrent state) per slot and attention masks spanning every cell, so the cache is
        not n times one sequence's. The most sequences whose cache and overhead fit beside the share's weights, given
        that one does: at most the front end's slots where it fixes them (llama-server's 4), else by doubling."""
        assert isinstance(self.engine, LlamaCppEngine)

        def fits(n: int) -> bool:
            return share.weights + sum(self.need(share, context, n)) <= self.usable

        lo, hi = 1, self.engine.options.n_seq_max  # fits(lo); hi: the slots, or 0 to search for a bound
        if not hi:
            hi = 2
            while fits(hi):
                lo, hi = hi, 2 * hi
        elif fits(hi):
            return hi
        while hi - lo > 1:  # fits(lo), not fits(hi)
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def need(self, share: GpuShare, context: int, sequences: int) -> tuple[int, int]:
        """llama.cpp: a GPU's overhead and cache with `sequences` of `context` tokens in flight."""
        overhead = sum(i.bytes for i in self._llamacpp_overhead(share, context, sequences))
        return overhead, self._account(share.model, context, sequences).total

    def fullest(self, context: int) -> GpuShare | None:
        """llama.cpp: the GPU that decides at `context`, the one fitting the fewest sequences, then with the least
        left beside one of them (None for the other engines). The first GPU holds the most layers, the last the
        output layer and its logits; which decides depends on the context."""
        if not self.shares:
            return None
        if context not in self._fullest_at:
            self._fullest_at[context] = min(
                self.shares, key=lambda share: (self._room(share, context)[0], self.headroom(share, context))
            )
        return self._fullest_at[context]

    def headroom(self, share: GpuShare, context: int) -> int:
        """What a llama.cpp GPU has left beside its weights, its overhead as the row counts it (the pipeline copies
        where they fit) and one sequence of `context` tokens (Row.headroom_bytes, for this GPU): the room `_room`
        leaves, less the copies where they are kept."""
        room = self._room(share, context)[1]
        return room - self._copies(share, context) if self.pipelined(context) else room

    def tightest(self, context: int) -> GpuShare | None:
        """llama.cpp over several GPUs: the GPU with the least left beside one sequence of `context` tokens. It need
        not be the one that fits the fewest (fullest): a GPU with more weights and less cache per sequence has
        less to spare but room for more sequences."""
        if len(self.shares) < 2:
            return None
        return min(self.shares, key=lambda share: self.headroom(share, context))

    def account(self, context: int) -> CacheAccount:
        """One sequence's cache: on llama.cpp the fullest GPU's, else the whole model's (per_gpu divides it)."""
        share = self.fullest(context)
        return self._account(share.model if share else self.model, context)

    def per_gpu(self, account: CacheAccount) -> int:
        """A sequence's cache on the fullest GPU: vLLM's fullest pipeline stage, transformers' even share of the
        layers; llama.cpp's account is already its fullest GPU's."""
        if self.shares:
            return account.total
        if isinstance(self.engine, VllmEngine) and self.setup.pp > 1:
            stage, whole = fullest_stage_fraction(self.engine, self.model, self.setup.kv_dtype)
            return -(-account.total * stage // whole)
        return -(-account.total // self._layer_split())

    def cache(self, context: int) -> int:
        return self.per_gpu(self.account(context))

    def overhead(self, context: int, sequences: int = 1) -> tuple[Item, ...]:
        """Memory besides weights and cache with `sequences` of `context` tokens in flight. Only llama.cpp's graph
        depends on the sequences (a unified cache's attention spans all of their cells); the others size theirs
        for the engine's own maximum."""
        model, world = self.setup.model, self.setup.gpus
        if isinstance(self.engine, VllmEngine):
            return tuple(vllm_overhead(model, self.engine.batched_tokens(), world, self.engine.sampler_rows()))
        share = self.fullest(context)
        if share is not None:
            copies = PIPELINE_COPIES if self.pipelined(context) else 1
            return self._llamacpp_overhead(share, context, sequences, copies)
        if isinstance(self.engine, TransformersEngine):
            storage = self.engine.storage(model, self.setup.kv_dtype)
            transient = sum(
                layer.bytes_per_token(storage) * (context - self.engine.tokens_held(layer, context))
                for layer in model.layers
                if layer.token_cap is not None
            )
            return tuple(transformers_overhead(model, context, transient // self._layer_split(), world))
        raise InputError(f"no overhead model for engine {self.engine.name}")

    def _weights(self, context: int) -> int:
        share = self.fullest(context)
        return share.weights if share else self.weights

    def budget(self, context: int) -> int:
        if self.setup.kv_cache_memory_bytes is not None:
            return self.setup.kv_cache_memory_bytes
        # llama.cpp drops pipeline parallelism's copies where they do not fit: the cache may have their room
        overhead = sum(i.bytes for i in self.overhead(context) if i.label != PIPELINE_ITEM)
        return self.usable - self._weights(context) - overhead

    def vllm_capacity(self, max_model_len: int) -> Capacity:
        assert isinstance(self.engine, VllmEngine)
        # each stage's budget beside its own weights (one budget where they are split evenly); the stage with the
        # fewest blocks decides
        budget = max(0, self.budget(max_model_len))
        stages = [max(0, budget + self.weights - w) for w in self.stage_weights] or [budget] * self.setup.pp
        return pipeline_capacity(self.engine, self.setup.model, stages, max_model_len, self.setup.kv_dtype)

    def concurrency(self, context: int) -> float:
        if isinstance(self.engine, VllmEngine):
            return self.vllm_capacity(context).max_concurrency
        share = self.fullest(context)
        if share is not None:  # every GPU must hold its layers' cache: the scarcest decides
            return self._room(share, context)[0]
        # transformers: the budget holds one sequence's prefill overhead, and each more sequence brings its own
        grows = self.batch_overhead(context)
        per_sequence = self.cache(context) + grows
        return max(0, self.budget(context) + grows) // per_sequence if per_sequence else float("inf")

    def batch_overhead(self, context: int) -> int:
        """transformers: the overhead each sequence of a batch adds (PER_SEQUENCE: generate() prefills the batch's
        prompts together); 0 for the engines whose overhead does not grow with the sequences in flight this way."""
        if not isinstance(self.engine, TransformersEngine):
            return 0
        return sum(item.bytes for item in self.overhead(context) if item.label in PER_SEQUENCE)

    def fits(self, context: int) -> bool:
        return self.concurrency(context) >= 1

    def max_context(self) -> int:
        """Longest single-sequence context that fits, up to the context limit; 0 when not even one token does."""
        if self.fits(self.limit):
            return self.limit
        lo, hi = 0, self.limit  # fits(lo) or lo == 0; not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def row(self, context: int) -> Row:
        account = self.account(context)
        cache = self.per_gpu(account)
        overhead = self.overhead(context)
        weights = self._weights(context)
        total = weights + sum(i.bytes for i in overhead) + cache
        concurrency = self.concurrency(context)
        share, tight = self.fullest(context), self.tightest(context)
        other = tight is not None and share is not None and tight.index != share.index
        return Row(
            context=context,
            cache_bytes=cache,
            weights_bytes=weights,
            overhead_bytes=sum(i.bytes for i in overhead),
            total_bytes=total,
            headroom_bytes=self.usable - total,
            fits=concurrency >= 1,
            max_concurrency=concurrency,
            account=account,
            overhead=overhead,
            gpu=share.label(self.setup.gpus) if share and self.setup.gpus > 1 else "",
            tightest=tight.label(self.setup.gpus) if other and tight else "",
            tightest_headroom_bytes=self.headroom(tight, context) if other and tight else 0,
            slots=self.slot_bound(concurrency),
            n_ctx=self.shared_cells(context, concurrency),
            max_num_seqs=self.seq_bound(concurrency),
            front_end_runs=self.front_end_bound(concurrency),
        )

    def front_end_bound(self, concurrency: float) -> int:
        """The sequences llama.cpp's front end runs at once where fewer than the memory holds (0 otherwise)."""
        if not isinstance(self.engine, LlamaCppEngine):
            return 0
        runs = self.engine.front_end_runs()
        return runs if runs and runs < concurrency < float("inf") else 0

    def seq_bound(self, concurrency: float) -> int:
        """vLLM's --max-num-seqs where the cache holds more requests than its scheduler runs at once (0 otherwise;
        core/engines/vllm_cluster.py caps a plan's requests by it too)."""
        if not isinstance(self.engine, VllmEngine):
            return 0
        cap = self.engine.max_seqs()
        return cap if concurrency >= cap + 1 else 0

    def shared_cells(self, context: int, concurrency: float) -> int:
        """llama.cpp's unified cache: the -c that `concurrency` requests of `context` tokens share (0 otherwise)."""
        if not self.unified or not 1 <= concurrency < float("inf"):
            return 0
        assert isinstance(self.engine, LlamaCppEngine)
        return self.engine.cells(context, int(concurrency))

    def slot_bound(self, concurrency: float) -> int:
        """The slots of a unified llama.cpp cache when they, not memory, bound `concurrency` (0 otherwise)."""
        if not self.unified:
            return 0
        assert isinstance(self.engine, LlamaCppEngine)
        slots = self.engine.options.n_seq_max
        return slots if slots and concurrency == slots else 0


def table_contexts(limit: int) -> list[int]:
    contexts = [c for c in TABLE_CONTEXTS if c <= limit]
    if limit not in contexts and limit >= 1024:
        contexts.append(limit)
    return contexts or [limit]


def fit(setup: Setup, contexts: list[int] | None = None) -> Fit:
    solver = Solver(setup)
    wanted = contexts or table_contexts(solver.limit)
    for c in wanted:
        if c <= 0:
            raise InputError(f"context must be positive, got {c}")
        if c > solver.limit:
            raise InputError(
                f"context {format_tokens(c)} is above the limit of {format_tokens(solver.limit)} tokens "
                f"({'max_model_len' if setup.max_model_len else 'the model maximum'}) for {setup.model.name}"
            )
    rows = tuple(solver.row(c) for c in wanted)
    notes = list(setup.model.notes)
    count = count_params(setup.model)
    vllm = None
    if isinstance(solver.engine, VllmEngine):
        vllm = solver.vllm_capacity(solver.limit)
        if setup.card.fp32_only:  # the cards timed by their FP32 peak are Pascal's (core.memory.gpus.Card)
            notes.append(
                f"{NEEDS_CC} (its installation guide); {setup.card.name} is a Pascal "
                "card (6.x): these are the bytes vLLM would need, but its builds do not run on this card"
            )
        if setup.card.vendor == "Apple":
            notes.append(f"{ON_APPLE}: these are the bytes of vLLM's CUDA layout, not checked there")
    if isinstance(solver.engine, LlamaCppEngine):
        n, where = len(setup.model.layers), solver.offload
        assert where is not None  # set for every llama.cpp setup
        placed = (
            f"all {n} layers and the output layer"
            if where.layers.start == 0 and where.output
            else f"-ngl {setup.gpu_layers}: "
            + (
                (f"the last {len(where.layers)} of {n} layers" + (" and the output layer" if where.output else ""))
                if where.layers
                else ("only the output layer" if where.output else "no layer")
            )
        )
        moe = where.cpu_experts
        in_ram = "the token embedding table stays in system RAM"
        if moe and count.experts:
            in_ram = f"the routed experts of {layer_span(moe.start, moe.stop - 1)} and the token embedding "
            in_ram += "table stay in system RAM"
        notes.append(f"llama.cpp: {placed} on the {'GPUs' if setup.gpus > 1 else 'GPU'}; {in_ram}")
        if setup.gpus > 1 and where.layers:
            parts = "; ".join(share.label(setup.gpus) for share in solver.shares)
            notes.append(
                f"llama.cpp splits the layers over the {setup.gpus} GPUs by their free memory, here taken as equal: "
                f"{parts}. Each row is the GPU that fits the fewest sequences at its context. A GPU with less free "
                "memory hands a boundary layer to its neighbour. llama.cpp's own devices agree, buffer for buffer "
                "(its RPC backend, tests/test_llamacpp_split.py)"
            )
            if where.pipelines:
                # where even one sequence fits: a row that does not fit has no run to drop the copies from
                off = ", ".join(format_tokens(c) for c in wanted if solver.fits(c) and not solver.pipelined(c))
                notes.append(
                    "llama.cpp runs the GPUs as a pipeline (pipeline parallelism: a prompt's micro-batches overlap), "
                    f"keeping {PIPELINE_COPIES} copies of each GPU's inputs, an overhead item of their own"
                    + (f"; at {off} they do not fit and it runs without them (one copy)" if off else "")
                )
        notes += flag_notes(setup)
        if solver.engine.fixed_slots():
            notes.append(solver.engine.slots_note(setup.model))
        elif solver.engine.options.n_seq_max > 1:  # llama-server's slots, its unified cache turned off
            notes.append(solver.engine.split_note())
    own = "" if setup.weights else default_format(setup.model)  # raises for a checkpoint it cannot count
    if isinstance(solver.engine, LlamaCppEngine) and own in CONVERTER_DEQUANTIZES:
        notes.append(
            f"llama.cpp: the {own} checkpoint is sized as the {solver.format} GGUF its converter writes "
            f"(convert_hf_to_gguf.py dequantizes {own} to --outtype auto); --weights q8_0 or q4_k_m is smaller"
        )
    if count.stored and format_named(solver.format).gguf and solver.format != STORED_FTYPE[count.stored]:
        notes.append(
            f"llama.cpp: the routed experts stay {count.stored} in every GGUF type, as the checkpoint ships them (the "
            f"converter writes them as they are; llama-quantize does not requantize them); the {solver.format} "
            f"type applies to the other tensors ({STORED_FTYPE[count.stored]} keeps them Q8_0)"
        )
    if solver.kernel is not None and solver.relaid:
        notes.append(
            f"vLLM re-lays the MXFP4 experts for its {solver.kernel.name} MoE kernel (padding, bias dtype): "
            f"+{format_bytes(solver.relaid)} over the checkpoint"
        )
    if rows and rows[0].weights_bytes > solver.usable:
        notes.append("the weights alone exceed the card's usable memory")
    return Fit(
        setup=setup,
        weights_format=solver.format,
        weights_bytes=solver.weights,
        usable_bytes=solver.usable,
        kv_budget_bytes=solver.budget(wanted[0]),
        overhead_bytes=rows[0].overhead_bytes,
        max_context=solver.max_context(),
        context_limit=solver.limit,
        rows=rows,
        vllm=vllm,
        notes=tuple(notes),
        engine=solver.engine,
    )
