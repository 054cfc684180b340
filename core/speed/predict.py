"""Decode, prefill and time to first token for a Setup: a roofline per device plus a per-pass engine overhead.

time of a pass on a device = max(bytes ÷ (bandwidth × eff), FLOPs ÷ (peak × eff)); devices a pass crosses
(llama.cpp's -ngl split) add up; the engine's overhead comes on top. Every input is a field of the result, so a
figure can be shown with its formula.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from core.dtypes import dtype_named
from core.engines.base import per_count, sized_tensors
from core.engines.llamacpp import LlamaCppEngine, Offload
from core.engines.vllm_engine import NEEDS_CC, ON_APPLE, VllmEngine
from core.errors import InputError
from core.fit import Setup, setup_format
from core.memory.gpus import Card
from core.memory.quant import STORED_FTYPE, format_named
from core.model.layers import FullAttention
from core.model.params import count_params
from core.speed.allreduce import AllReduces, all_reduces
from core.speed.calibration import Calibration
from core.speed.efficiency import Efficiency, efficiency_for, overhead_counts
from core.speed.groups import (
    EXPERT_LOOP,
    MOE_PROMPT,
    PCIE_GB_S,
    SPLIT_PROMPT,
    TILED_EXPERTS,
    ErrorBar,
    MatmulPeak,
    calibrates,
    card_class,
    default_backend,
    driver_caveat,
    error_bar,
    expert_columns,
    expert_loop,
    flash_attention_peak,
    format_family,
    fp16_dequant,
    matmul_peak,
    mmq_traffic,
    mmq_traffic_bytes,
    op_offload,
    tiled_experts,
    volta_expert_loop,
    vulkan_expert_tile,
    vulkan_whole_tiles,
)
from core.speed.ram import ISA_NAMES
from core.speed.work import PassWork, Weights, decode_work, experts_touched, prefill_work

FP8_FORMATS = frozenset({"fp8", "fp8_block"})
# Without flash attention llama.cpp stores the scores: KQ in F32 written by the mul_mat and read by soft_max, the
# soft_max's F32 result written and read by the KQV mul_mat (llama-graph.cpp build_attn_mha, non-flash branch)
KQ_BYTES = 16
PREFILL_SPANS = 16  # prefill chunks are grouped into at most this many spans, each timed as one roofline
# Spans × layers one prefill is timed over: models past 1,024 layers (only what-ifs and crafted configs) get fewer
# spans, so a request's work stays bounded (each span is still a whole roofline; see prefill_spans).
PREFILL_LAYER_SPANS = PREFILL_SPANS * 1024


Table = Mapping[tuple[str, str], Efficiency]


@dataclass(frozen=True)
class Hardware:
    """The host beside the Setup's card: RAM bandwidth and threads for layers left in RAM; cpu_only runs all there."""

    ram_gb_s: float
    threads: int
    cpu_only: bool = False
    backend: str | None = None  # the card's ggml backend (llama.cpp); None: the vendor's usual one
    isa: str = ""  # the host CPU's vector ISA (core.speed.ram.vector_isa) where known: its kernels' family factors
    calibration: Calibration | None = None  # this host's measured CPU matmul rates (python -m core calibrate)
    ram_thread_gb_s: float = 0.0  # one thread's RAM copy rate where measured (0: ram_gb_s at any thread count)
    pcie_gb_s: float = PCIE_GB_S  # host to GPU, for weights llama.cpp's op offload copies (groups.op_offload)

    @property
    def ram_stream_gb_s(self) -> float:
        """The RAM bandwidth `threads` threads reach: at most that many times one thread's (core.speed.ram
        .RamBandwidth says why)."""
        return min(self.ram_gb_s, self.threads * self.ram_thread_gb_s) if self.ram_thread_gb_s else self.ram_gb_s


def backend_of(setup: Setup, hw: Hardware) -> str:
    return "cpu" if hw.cpu_only else hw.backend or default_backend(setup.card)


def group(setup: Setup, hw: Hardware, device: str) -> tuple[str, str]:
    """(backend, card class): the group whose fitted efficiencies and held-out error a device's figures take."""
    backend = "cpu" if device == "cpu" else backend_of(setup, hw)
    return backend, card_class(setup.card, backend)


def _eff(table: Table | None, setup: Setup, hw: Hardware, device: str) -> Efficiency:
    engine = setup.engine.name
    if table is not None and (engine, device) in table:
        return table[(engine, device)]
    return efficiency_for(engine, device, *group(setup, hw, device))


def flash_attn(setup: Setup) -> bool:
    """llama.cpp's -fa (auto counts as on); the other engines always run fused attention kernels."""
    engine = setup.engine
    return engine.options.flash_attn if isinstance(engine, LlamaCppEngine) else True


@dataclass(frozen=True)
class DevicePart:
    """The share of one pass that runs on one device. The dense weight matmuls, the routed experts' and the
    attention are separate kernels, each with its own roofline: max(weights ÷ bandwidth, matmul FLOPs ÷ rate) for the
    dense ones (the two added for mat-vec kernels whose FLOPs do not hide under their read: `matvec`), the same for
    the experts', + max(cache ÷ bandwidth, attention FLOPs ÷ rate)."""

    device: str  # "gpu" | "cpu"
    layers: int
    weight_bytes: float  # weights (experts touched), recurrent state read and written, the output head
    cache_bytes: float  # attention cache read (and, in prefill, written)
    matmul_flops: float  # weights and recurrent updates
    attention_flops: float
    bandwidth_gb_s: float  # before efficiency
    peak_gflops: float  # before efficiency; on a CPU, threads (its rates are per thread)
    attention_peak_gflops: float  # attention stays bf16 when FP8 weights run their matmuls on FP8 tensor cores
    weights_s: float  # weight_bytes ÷ (bandwidth × eff)
    matmul_s: float  # matmul_flops ÷ (peak × eff)
    cache_s: float
    attention_s: float
    efficiency: Efficiency
    expert_flops: float = 0.0  # the routed experts' share of matmul_flops (timed at their own GEMM fill)
    expert_bytes: float = 0.0  # the routed experts' share of weight_bytes (read at Efficiency.expert_bandwidth)
    cache_gb_s: float = 0.0  # the cache's streaming rate, all threads, as calibrated or fitted for the ISA (0: none)
    peak_note: str = ""  # why the matmuls' peak differs from the card's listed one (core.speed.groups.MatmulPeak)
    family_note: str = ""  # the weight format's kernel factor (on a CPU: and the ISA it was fitted for)
    cache_note: str = ""  # on a CPU: where the cache stream's rate comes from (this host's calibration, its ISA's fit)
    attention_note: str = ""  # why the attention's peak is below the card's listed one (groups.flash_attention_peak)
    expert_note: str = ""  # why a decode step's routed experts run as a GEMM (groups.tiled_experts)
    bandwidth_note: str = ""  # on a CPU whose one-thread copy rate caps what its threads stream (Hardware)
    routed_tokens: int = 1  # tokens each routed expert gets a pass (tokens × top-k ÷ experts)
    expert_columns: int = 1  # the columns each routed expert's prompt GEMM computes (groups.expert_columns)
    pass_tokens: int = 1  # tokens a pass (a prompt's chunk; a decode step's sequences)
    tile_bytes: float = 0.0  # a prompt's MMQ tile traffic with no reuse between tiles (groups.mmq_traffic_bytes)
    tile_s: float = 0.0  # tile_bytes × Efficiency.tile_traffic ÷ (bandwidth × eff): 0 where not timed
    # the weights' conversion to FP16 for cuBLAS (groups.fp16_dequant): the quantised bytes read and the FP16 bytes
    # written, a kernel of its own before the GEMM (which then reads the FP16 weights: weight_bytes)
    dequant_bytes: float = 0.0
    dequant_s: float = 0.0  # dequant_bytes ÷ (bandwidth × eff × Efficiency.dequant_bandwidth)
    dequant_note: str = ""
    # weights in host memory copied to the GPU before their matmuls (groups.op_offload), at the PCIe rate
    copy_bytes: float = 0.0
    copy_s: float = 0.0
    copy_note: str = ""
    # a decode step's routed experts through ggml-vulkan's tiled matmul: columns computed per token routed
    # (tiled_columns), 0 where they take the mat-vec kernels or the pass is a prompt's
    expert_padding: float = 0.0
    whole_tiles: bool = False  # those tiles computed whole, at a prompt tile's rate (groups.vulkan_whole_tiles)
    # the routed experts' shares of weights_s and matmul_s: their matmuls (mul_mat_id) are kernels of their own, with
    # their own roofline beside the dense matmuls'
    expert_weights_s: float = 0.0
    expert_matmul_s: float = 0.0
    matvec: bool = False  # mat-vec kernels whose FLOPs follow their weights' read (groups.CUDA_MATVEC_WHY)

    @property
    def tile_note(self) -> str:
        """A pass's routed experts padded to a tile (groups.expert_columns, tiled_columns), if they are."""
        if self.expert_padding:
            rate = (
                "at the rate a prompt's full tile runs (its plain shaders compute every column of a tile)"
                if self.whole_tiles
                else "at the prompt GEMMs' full rate (its cooperative-matrix shaders skip a tile's missing tokens)"
            )
            return (
                f"each routed expert this step touches gets about {self.routed_tokens} of its "
                f"{self.pass_tokens} tokens and runs them as {self.expert_columns} columns, ggml-vulkan's small tile "
                f"({self.expert_padding:.3g} columns computed per token routed), {rate}"
            )
        if self.expert_columns <= self.routed_tokens:
            return ""
        return (
            f"each routed expert's {self.routed_tokens} tokens a pass run as {self.expert_columns} columns of "
            f"llama.cpp's MMQ tiles, which it sizes for the pass's {self.pass_tokens} tokens (ggml_cuda_mul_mat_q "
            "tiles for ne12, the pass's tokens)"
        )

    @property
    def bytes(self) -> float:
        return self.weight_bytes + self.cache_bytes + self.dequant_bytes

    @property
    def matmul_gflops(self) -> float:
        """The matmul rate used, after every factor (efficiency, format family, GEMM fill, host calibration)."""
        return self.matmul_flops / self.matmul_s / 1e9 if self.matmul_s else 0.0

    @property
    def attention_gflops(self) -> float:
        return self.attention_flops / self.attention_s / 1e9 if self.attention_s else 0.0

    @property
    def reads_s(self) -> float:
        """The weight matmuls' memory side: their weights, or their MMQ tiles' traffic where that takes longer."""
        return max(self.weights_s, self.tile_s)

    @property
    def dense_sides(self) -> tuple[float, float]:
        """The dense weight matmuls' (weights ÷ bandwidth, FLOPs ÷ rate): all but the routed experts'."""
        return self.weights_s - self.expert_weights_s, self.matmul_s - self.expert_matmul_s

    @property
    def rooflines_s(self) -> float:
        """The dense matmuls' roofline plus the routed experts' (mul_mat_id, a kernel of its own): each the slower of
        its weights and its FLOPs, or, for mat-vec kernels whose FLOPs do not hide under their read, the two added."""
        experts = (self.expert_weights_s, self.expert_matmul_s)
        if self.matvec:
            return sum(self.dense_sides) + sum(experts)
        return max(self.dense_sides) + max(experts)

    @property
    def matmuls_s(self) -> float:
        """The weight matmuls: their rooflines, or their MMQ tiles' traffic where that takes longer."""
        return max(self.tile_s, self.rooflines_s)

    @property
    def memory_s(self) -> float:
        return self.copy_s + self.dequant_s + self.reads_s + self.cache_s

    @property
    def compute_s(self) -> float:
        return self.matmul_s + self.attention_s

    @property
    def seconds(self) -> float:
        return self.copy_s + self.dequant_s + self.matmuls_s + max(self.cache_s, self.attention_s)

    @property
    def waits(self) -> dict[str, float]:
        """Seconds waiting on memory and on compute: the larger side of each kernel's roofline (the FP16
        conversion's on memory)."""
        dense_read, dense_flops = self.dense_sides
        if self.tile_s > self.rooflines_s:
            matmuls = self.tile_s
        elif self.matvec:
            matmuls = dense_read + self.expert_weights_s
        else:
            matmuls = (dense_read if dense_read >= dense_flops else 0.0) + (
                self.expert_weights_s if self.expert_weights_s >= self.expert_matmul_s else 0.0
            )
        memory = self.copy_s + self.dequant_s + matmuls + (self.cache_s if self.cache_s >= self.attention_s else 0.0)
        return {"memory": memory, "compute": self.seconds - memory}


@dataclass(frozen=True)
class Pipeline:
    """llama.cpp's pipeline parallelism over its layer split (llama-context.cpp pipeline_parallel, PR #6017): each
    GPU runs its layers of a prompt's micro-batches on its own stream and hands each on as it finishes it, so the
    GPUs work on consecutive micro-batches at once, across llama_decode calls too (a call waits for none: the
    outputs are read when asked for). After the first pass, each further pass costs what the busiest GPU spends
    on it (its share of the layers' device time) or what the CPU spends building and launching it (the pass's
    overhead: one thread submits every GPU's kernels, so that part does not shrink), whichever is longer."""

    gpus: int  # GPUs holding layers
    busiest: int  # layers on the GPU that holds the most (the first: Offload.split)
    layers: int

    @property
    def share(self) -> float:
        return self.busiest / self.layers

    def step_s(self, device_s: float, overhead_s: float) -> float:
        """A pass after the first, from one pass's device time and overhead."""
        return max(self.share * device_s, overhead_s)

    def saved_s(self, device_s: float, overhead_s: float, passes: int) -> float:
        """What overlapping saves of `passes` passes with `device_s` of device time and `overhead_s` of overhead in
        all: every pass but the first costs step_s of an average pass instead of the whole of it."""
        device, overhead = device_s / passes, overhead_s / passes
        return (passes - 1) * (device + overhead - self.step_s(device, overhead))


@dataclass(frozen=True)
class Timing:
    parts: tuple[DevicePart, ...]
    overhead_s: float
    # what overhead_s is made of: passes × driver.overhead_s(layers, chained, moe, hops, sequences) (None: by hand)
    passes: int = 1
    layers: int = 0
    chained: int = 0
    driver: Efficiency | None = None
    moe: int = 0  # layers with routed experts
    hops: int = 0  # GPUs past the first that each pass runs through (llama.cpp's layer split: gpu_hops)
    all_reduce: AllReduces | None = None  # one pass's (vLLM's tensor parallel: core.speed.allreduce)
    all_reduce_s: float = 0.0  # every pass's
    pipeline: Pipeline | None = None  # a prompt's passes overlapped across llama.cpp's layer split (prefill_timing)
    pipelined_s: float = 0.0  # what overlapping them saves
    sequences: int = 1  # sequences a pass carries (a decode step's batch; a prompt's passes are one sequence's)

    @property
    def counts(self) -> tuple[int, ...]:
        """Each pass's count of each of the driver's OVERHEAD_TERMS."""
        return overhead_counts(self.layers, self.chained, self.moe, self.hops, self.sequences)

    @property
    def memory_s(self) -> float:
        return sum(p.memory_s for p in self.parts)

    @property
    def compute_s(self) -> float:
        return sum(p.compute_s for p in self.parts)

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.parts) + self.overhead_s + self.all_reduce_s - self.pipelined_s

    @property
    def bytes(self) -> float:
        return sum(p.bytes for p in self.parts)

    @property
    def flops(self) -> float:
        return sum(p.matmul_flops + p.attention_flops for p in self.parts)

    @property
    def bound(self) -> str:
        """What the largest share of the time waits on."""
        shares = {
            "memory": sum(p.waits["memory"] for p in self.parts),
            "compute": sum(p.waits["compute"] for p in self.parts),
            "overhead": self.overhead_s,
            "all-reduce": self.all_reduce_s,
        }
        return max(shares, key=lambda k: shares[k])


@dataclass(frozen=True)
class Speed:
    context: int
    batch: int
    decode: Timing  # one step of `batch` sequences
    prefill: Timing  # one prompt of `context` tokens, chunk by chunk
    chunk: int  # prefill tokens per forward pass
    fits_concurrency: float | None = None
    decode_error: ErrorBar | None = None  # held-out error of the setup's group (core.speed.groups)
    prefill_error: ErrorBar | None = None

    @property
    def error(self) -> ErrorBar | None:
        """The decode figure's error bar (the one most answers lead with)."""
        return self.decode_error

    @property
    def decode_tok_s(self) -> float:
        """Output tokens per second of each sequence."""
        return 1.0 / self.decode.seconds

    @property
    def aggregate_tok_s(self) -> float:
        return self.batch / self.decode.seconds

    @property
    def prefill_tok_s(self) -> float:
        return self.context / self.prefill.seconds

    @property
    def ttft_s(self) -> float:
        """The first output token is sampled from the prefill's last logits: the prefill time of the prompt."""
        return self.prefill.seconds

    @property
    def bytes_per_step(self) -> float:
        return self.decode.bytes

    @property
    def bound(self) -> str:
        return self.decode.bound


def device_kind(setup: Setup, hw: Hardware) -> str:
    return "cpu" if hw.cpu_only else "gpu"


def untimed(setup: Setup) -> str | None:
    """Why the setup's card cannot be timed, or None: no bandwidth or peak figure, a Pascal card (timed by its
    FP32 peak) under an engine other than llama.cpp, or vLLM on an Apple GPU."""
    try:
        setup.card.timing_figures()
    except InputError as err:
        return str(err)
    if setup.card.vendor == "Apple" and isinstance(setup.engine, VllmEngine):
        return f"{ON_APPLE}; choose llama.cpp (Metal) for a speed on {setup.card.name}"
    if setup.card.fp32_only and not isinstance(setup.engine, LlamaCppEngine):
        why = (
            NEEDS_CC
            if isinstance(setup.engine, VllmEngine)
            else "its FP16 and BF16 run at 1/64 of the FP32 rate, which kvscope does not model"
        )
        return (
            f"{setup.card.name} has no FP16 or BF16 matrix units (Pascal): kvscope times only llama.cpp on it ({why}); "
            "choose llama.cpp, or give the card's peak (--gpu-tflops; in the app, the custom card's TFLOPS box)"
        )
    return None


def kernel_format(setup: Setup) -> str:
    """The format whose kernels time the matmuls: the setup's, except a GGUF of a model whose routed experts keep the
    type the checkpoint ships them in (gpt-oss: MXFP4 in every GGUF type, core.memory.quant._gguf_type), timed as
    llama.cpp's MXFP4 MoE type, whose experts carry most of the FLOPs. The bytes stay the GGUF's own."""
    fmt = setup_format(setup)
    if not format_named(fmt).gguf:
        return fmt
    return STORED_FTYPE.get(count_params(setup.model).stored, fmt)


def setup_weights(setup: Setup) -> Weights:
    model = setup.model
    count = count_params(model)
    fmt = setup_format(setup)
    dtype_bytes = dtype_named(model.dtype).block_bytes
    per_tensor = sized_tensors(count, fmt, dtype_bytes)
    tied = count.lm_head == 0
    if setup.weights_file is None:
        return per_count(
            count, ("speed weights", fmt, dtype_bytes), lambda: Weights.of(per_tensor, len(model.layers), tied)
        )
    # a real file's total replaces the estimate, spread in proportion
    estimate = sum(size for _, size in per_tensor)
    scale = setup.weights_file.total_bytes / estimate if estimate else 1.0
    return Weights.of(per_tensor, len(model.layers), tied, scale)


def placement(setup: Setup, hw: Hardware) -> Offload:
    """Which decoder layers and whether the output head run on the GPU: llama.cpp's -ngl (the last layers and the
    head: core.engines.llamacpp.Offload); other engines keep everything there, CPU-only nothing."""
    n = len(setup.model.layers)
    if hw.cpu_only:
        return Offload.of(0, n)
    if not isinstance(setup.engine, LlamaCppEngine):
        return Offload.of(None, n)
    return setup.engine.offload(setup.gpu_layers, n, setup.cpu_experts)


@dataclass(frozen=True)
class Share:
    """What of a pass one device runs: whole layers, less the experts that run elsewhere, plus experts of layers
    that run elsewhere (llama.cpp --n-cpu-moe), and perhaps the output head."""

    layers: range
    head: bool
    experts_away: range = range(0)  # layers in `layers` whose routed experts run on the other device
    experts_here: range = range(0)  # layers elsewhere whose routed experts run here
    # "all"; "attention": all but the weight matmuls, which run elsewhere (op offload); "copied": those matmuls
    # only, their weights copied in over PCIe first
    kernels: str = "all"


def fill(eff: Efficiency, pass_tokens: int, experts: bool = False, columns: int = 0) -> float:
    """The share of the prefill matmul rate a pass of `pass_tokens` tokens reaches: n ÷ (n + half), a GEMM's tiles
    filling as its token dimension grows (small -ub, short prompts); 1 when the entry sets no half-rate size. A routed
    expert's GEMM (`experts`, the tokens routed to it) fills by its own curve where the entry fitted one, over the
    `columns` its kernel computes where padding makes them more than its tokens (groups.expert_columns)."""
    half = (eff.expert_half_tokens if experts else 0.0) or eff.prefill_half_tokens
    return pass_tokens / (max(pass_tokens, columns) + half) if half > 0 else 1.0


def kernel_calibration(setup: Setup, hw: Hardware, device: str) -> Calibration | None:
    """This host's calibration where it timed the kernels this part runs: on the CPU, under llama.cpp, whose kernels
    `python -m core calibrate` times (or its portable kernel stands in for). transformers and vLLM multiply with
    PyTorch's own kernels at their own rates: they take the calibration's RAM figure (Hardware) and their engine's
    constants, not llama.cpp's measured rates (groups.calibrates; a CPU part's group backend is "cpu")."""
    return hw.calibration if calibrates(setup.engine.name, device) else None


def cpu_family_note(eff: Efficiency, family: str, factor: float, prefill: bool, isa: str) -> str:
    """What a CPU's matmul rate takes for the weight format's kernel family (`factor`, Efficiency.family_factor), and
    which CPUs that factor is from."""
    text = f"{family} kernels at {factor:.3g}× the float kernels' rate, "
    if eff.isa_factor(family, prefill, isa) is not None:
        return text + f"as fitted on {ISA_NAMES[isa]} CPUs"
    why = f"none of its own for {ISA_NAMES.get(isa, isa)} CPUs" if isa else "the CPU's vector ISA not known"
    return text + f"pooled over the CPUs fitted ({why})"


def _part(
    device: str,
    work: PassWork,
    share: Share,
    setup: Setup,
    hw: Hardware,
    prefill: bool,
    table: Table | None,
    pass_tokens: int = 1,
) -> DevicePart:
    eff = _eff(table, setup, hw, device)
    layers = [work.layers[i] for i in share.layers]
    away = [work.layers[i] for i in share.experts_away]
    here = [work.layers[i] for i in share.experts_here]

    def on_device(field: str) -> float:
        """The routed experts' bytes or FLOPs this device holds: its layers', less those placed on the other device,
        plus the other device's layers' placed here."""
        return (
            sum(getattr(w, field) for w in layers)
            - sum(getattr(w, field) for w in away)
            + sum(getattr(w, field) for w in here)
        )

    matmuls, rest = share.kernels != "attention", share.kernels != "copied"
    experts, expert_bytes = (on_device("expert_flops"), on_device("expert_bytes")) if matmuls else (0.0, 0.0)
    # the dense matmuls' own weights and FLOPs (no recurrent state, no output head): MMQ's tiles move these
    dense_bytes = sum(w.weight_bytes - w.expert_bytes for w in layers) if matmuls else 0.0
    dense_flops = sum(w.matmul_flops - w.expert_flops for w in layers) if matmuls else 0.0
    head = share.head and matmuls
    state_bytes = sum(w.state_bytes for w in layers) if rest else 0.0
    weight_bytes = dense_bytes + state_bytes + expert_bytes + (work.head_bytes if head else 0.0)
    copy_bytes = weight_bytes if share.kernels == "copied" else 0.0
    cache_bytes = float(sum(w.cache_bytes for w in layers)) if rest else 0.0
    if rest and not flash_attn(setup):  # the score matrices' round trips through memory (KQ_BYTES)
        cache_bytes += KQ_BYTES * sum(w.scores for w in layers)
    state_flops = sum(w.state_flops for w in layers) if rest else 0.0
    matmul = dense_flops + state_flops + experts + (work.head_flops if head else 0.0)
    attention = float(sum(w.attention_flops for w in layers)) if rest else 0.0
    n_experts, top_k = next((w.routing for w in work.layers if w.routing[0]), (1, 1))
    fmt = kernel_format(setup)
    llama_gpu = device == "gpu" and isinstance(setup.engine, LlamaCppEngine)
    backend = backend_of(setup, hw) if llama_gpu else ""
    dequant = fp16_dequant(setup.card, backend, fmt, pass_tokens)  # "" off llama.cpp on CUDA
    dequant_bytes = 0.0
    if dequant:  # the GEMM reads FP16 weights, 2 bytes a parameter, converted from the quantised ones every pass
        fp16_bytes = dense_flops / work.tokens * math.ceil(work.tokens / pass_tokens)
        dequant_bytes = dense_bytes + fp16_bytes
        weight_bytes += fp16_bytes - dense_bytes
    if device == "gpu":
        card = setup.card
        refused = untimed(setup)
        if refused:
            raise InputError(refused)
        card_gb_s, dense_tflops = card.timing_figures()  # BF16's peak, else FP16's (Card.dense_tflops says why)
        share = setup.tp  # tensor parallel: each GPU reads and computes its share, in parallel
        bw = card_gb_s * share
        # FP8 checkpoints run their matmuls on FP8 tensor cores where the card has them (vLLM's W8A8 path)
        fp8 = setup.weights in FP8_FORMATS and card.fp8_tflops and isinstance(setup.engine, VllmEngine)
        attention_peak = dense_tflops * 1e3 * share
        limit, attention_limit = kernel_peaks(setup, hw, fmt, prefill, pass_tokens)
        tiled = "" if prefill else expert_kernel(setup, hw, fmt, pass_tokens)
        peak = (card.fp8_tflops * 1e3 * share if fp8 else attention_peak) * limit.scale
    else:
        bw = hw.ram_stream_gb_s
        peak = attention_peak = float(hw.threads)  # CPU figures are GFLOP/s per thread
        limit = attention_limit = MatmulPeak()
        tiled = ""
    family = format_family(fmt)
    routed = max(1, pass_tokens * top_k // n_experts)
    llama_prompt = llama_gpu and prefill
    columns = expert_columns(backend, fmt, pass_tokens, routed) if llama_prompt and experts else routed
    padding = 0.0  # tiled_columns' padding, where a decode step's experts take the tiled matmul
    whole_tiles = bool(tiled and experts) and vulkan_whole_tiles(setup.card, backend, fmt)
    cal = kernel_calibration(setup, hw, device)
    measured = cal.rate(fmt, prefill, hw.threads) if cal else None
    family_note = ""
    if measured is not None:  # this host's own matmul rate for the format's kernels
        mm_rate = expert_rate = peak * measured
    else:
        isa = hw.isa if device == "cpu" else ""
        factor = eff.family_factor(family, prefill, isa)
        base = peak * (eff.prefill_compute if prefill else eff.decode_compute) * factor
        if device == "cpu" and family != "float":
            family_note = cpu_family_note(eff, family, factor, prefill, isa)
        elif family != "float" and factor != 1.0:  # a GPU's: shown, so the rate in the explanation can be traced
            family_note = f"{family} kernels at {factor:.5g}× the float kernels' rate, as fitted (fitted.json families)"
        # a prefill pass's GEMMs fill with its tokens; each routed expert's only with the tokens routed to it
        # (tokens × top-k ÷ experts: llama.cpp's mul_mat_id groups the batch by expert)
        mm_rate = base * fill(eff, pass_tokens) if prefill else base
        expert_rate = base * fill(eff, routed, experts=True, columns=columns) if prefill else base
        if tiled and experts:  # a decode step's experts through the prompt's tiled matmul, each padded to its tile
            routed, columns, padding = tiled_columns(setup.card, backend, pass_tokens, n_experts, top_k)
            tile_rate = peak * eff.prefill_compute * eff.family_factor(family, True, "")
            if whole_tiles:  # a padded tile costs what a prompt's full one does
                tile_rate *= fill(eff, columns, experts=True)
            expert_rate = tile_rate / padding
    head_dim = attention_head_dim(setup) if cal else 0  # what the calibrated rates are looked up by
    calibrated = cal.attention_rate(prefill, head_dim) if cal else None
    # a CPU's decode step streams the cache at this host's measured rate, else at its ISA's fitted one, where either
    # is known; otherwise as the weights
    per_thread = (cal.cache_rate(head_dim) if cal else eff.isa_cache_rate(hw.isa)) if device == "cpu" else None
    stream = attention_peak * (per_thread or 0.0) if not prefill else 0.0
    isa_name = ISA_NAMES.get(hw.isa, hw.isa)
    cache_note = (
        ("as this host's calibration measured it" if cal else f"as fitted on {isa_name} CPUs") if stream else ""
    )
    attn_rate = attention_peak * (
        calibrated if calibrated is not None else eff.prefill_attention if prefill else eff.decode_attention
    )
    if not flash_attn(setup):
        attn_rate *= eff.flash_off
    attn_rate *= attention_limit.scale
    rate = bw * 1e9 * eff.bandwidth
    tile_bytes = 0.0
    if llama_prompt and mmq_traffic(setup.card, backend, fmt, pass_tokens):
        tile_bytes = mmq_traffic_bytes(dense_bytes, expert_bytes, dense_flops + experts, pass_tokens, columns)
    return DevicePart(
        device, len(layers), weight_bytes, cache_bytes, matmul, attention, bw, peak, attention_peak,
        (weight_bytes - expert_bytes) / rate + expert_bytes / (rate * eff.expert_bandwidth),
        (matmul - experts) / (mm_rate * 1e9) + experts / (expert_rate * 1e9),
        cache_bytes / (stream * 1e9) if stream else cache_bytes / rate, attention / (attn_rate * 1e9), eff, experts,
        expert_bytes, stream, limit.why, family_note, cache_note, attention_limit.why, tiled if experts else "",
        ram_note(hw) if device == "cpu" else "", routed, columns, pass_tokens, tile_bytes,
        tile_bytes * eff.tile_traffic / rate, dequant_bytes, dequant_bytes / (rate * eff.dequant_bandwidth), dequant,
        copy_bytes, copy_bytes / (hw.pcie_gb_s * 1e9), op_offload(backend, pass_tokens) if copy_bytes else "",
        expert_padding=padding, whole_tiles=whole_tiles,
        expert_weights_s=expert_bytes / (rate * eff.expert_bandwidth), expert_matmul_s=experts / (expert_rate * 1e9),
        matvec=limit.matvec,
    )  # fmt: skip


def ram_note(hw: Hardware) -> str:
    if hw.ram_stream_gb_s >= hw.ram_gb_s:
        return ""
    who = "1 thread streams" if hw.threads == 1 else f"{hw.threads} threads stream"
    return (
        f"{who} RAM at most {hw.threads} × {hw.ram_thread_gb_s:.3g} GB/s, one thread's copy rate, of the machine's "
        f"{hw.ram_gb_s:.3g} GB/s"
    )


def kernel_peaks(setup: Setup, hw: Hardware, fmt: str, prefill: bool, tokens: int = 1) -> tuple[MatmulPeak, MatmulPeak]:
    """The matmuls' and the attention's peaks, for a pass of `tokens` tokens, as shares of the card's listed one where
    llama.cpp's own kernels cannot reach it (groups.matmul_peak, groups.flash_attention_peak); other engines run the
    vendor's libraries."""
    if not isinstance(setup.engine, LlamaCppEngine):
        return MatmulPeak(), MatmulPeak()
    backend = backend_of(setup, hw)
    attention = flash_attention_peak(setup.card, backend, prefill, flash_attn(setup))
    return matmul_peak(setup.card, backend, fmt, tokens), attention


def tiled_columns(card: Card, backend: str, tokens: int, n_experts: int, top_k: int) -> tuple[int, int, float]:
    """How a decode pass of `tokens` sequences runs its routed experts through ggml-vulkan's tiled matmul: (the
    tokens each expert it touches gets, rounded; the columns that expert's GEMM computes, its tokens padded to the
    small tile, groups.vulkan_expert_tile; the columns computed per token routed). Where its cooperative-matrix
    shaders run them, at the prompt GEMMs' full rate, without the fill curve: they skip a tile's missing tokens, and
    the curve is fitted on prompt passes of hundreds of tokens, in which each workgroup of mul_mat_id also walks the
    pass's tokens × top-k expert ids to find its rows (load_row_ids, mul_mm_id_funcs.glsl). Where its plain shaders
    do (groups.vulkan_whole_tiles), a padded tile costs what a prompt's full one does: the curve at the tile."""
    tile = vulkan_expert_tile(card_class(card, backend))
    touched = experts_touched(n_experts, top_k, tokens)
    per_expert = tokens * top_k / touched
    columns = tile * math.ceil(per_expert / tile)
    return max(1, round(per_expert)), columns, columns / per_expert


def expert_kernel(setup: Setup, hw: Hardware, fmt: str, tokens: int) -> str:
    """Why llama.cpp runs a decode step's routed experts through its tiled matmul (groups.tiled_experts), or ""."""
    if not isinstance(setup.engine, LlamaCppEngine):
        return ""
    return tiled_experts(backend_of(setup, hw), fmt, tokens)


def attention_head_dim(setup: Setup) -> int:
    """The head width of the model's growing attention (its first such layer's; 128 for MLA, whose latent has no
    head width of that kind): what a calibrated CPU attention rate is looked up by."""
    for layer in setup.model.layers:
        for part in layer.parts():
            if isinstance(part, FullAttention):
                return part.head_dim
    return 128


def _timing(work: PassWork, setup: Setup, hw: Hardware, prefill: bool, table: Table | None, passes: int = 1) -> Timing:
    n = len(work.layers)
    where = placement(setup, hw)
    parts = []
    per_pass = math.ceil(work.tokens / passes)
    if where.layers or where.output:
        gpu = Share(where.layers, where.output, experts_away=where.cpu_experts)
        parts.append(_part("gpu", work, gpu, setup, hw, prefill, table, per_pass))
    if where.on_cpu or not where.output or where.cpu_experts:
        cpu = Share(where.on_cpu, not where.output, experts_here=where.cpu_experts)
        if offloads(setup, hw, per_pass):  # their matmuls on the GPU, the rest (attention, state) where they are
            parts.append(_part("cpu", work, replace(cpu, kernels="attention"), setup, hw, prefill, table, per_pass))
            parts.append(_part("gpu", work, replace(cpu, kernels="copied"), setup, hw, prefill, table, per_pass))
        else:
            parts.append(_part("cpu", work, cpu, setup, hw, prefill, table, per_pass))
    # the overhead of the device that drives the pass: the GPU's whenever one takes part
    eff = _eff(table, setup, hw, driver(setup, hw))
    chained, moe, hops = chained_layers(setup), sum(1 for w in work.layers if w.routing[0]), gpu_hops(setup, hw)
    ar = tensor_parallel(setup, hw, n, per_pass)
    sequences = 1 if prefill else work.tokens
    overhead = eff.overhead_s(n, chained, moe, hops, sequences) * passes
    return Timing(
        tuple(parts), overhead, passes, n, chained, eff, moe, hops, ar, ar.seconds * passes if ar else 0.0,
        sequences=sequences,
    )  # fmt: skip


def tensor_parallel(setup: Setup, hw: Hardware, layers: int, tokens: int) -> AllReduces | None:
    """vLLM's all-reduces of a pass of `tokens` tokens over its tensor-parallel GPUs (core.speed.allreduce); the
    roofline times each GPU's share as if alone, which they join."""
    if not isinstance(setup.engine, VllmEngine) or driver(setup, hw) != "gpu":
        return None
    return all_reduces(setup.tp, layers, setup.model.hidden_size, tokens, setup.card)


def pipeline(setup: Setup, hw: Hardware) -> Pipeline | None:
    """llama.cpp's pipeline over the GPUs that hold layers, where it runs one (Offload.pipelines: every layer and
    the output layer on the GPUs, no expert left in RAM); None on one GPU or another engine."""
    if not isinstance(setup.engine, LlamaCppEngine) or setup.gpus < 2 or driver(setup, hw) != "gpu":
        return None
    where = placement(setup, hw)
    held = [len(p.layers) for p in where.split(setup.gpus) if p.layers]
    if not where.pipelines or len(held) < 2:
        return None
    return Pipeline(len(held), max(held), sum(held))


def gpu_hops(setup: Setup, hw: Hardware) -> int:
    """The GPUs past the first that each pass of llama.cpp's layer split runs through, one after another (those
    that hold a slot of the offload: Offload.split); vLLM's tensor and pipeline parallel are timed by their shares."""
    if not isinstance(setup.engine, LlamaCppEngine) or setup.gpus < 2:
        return 0
    where = placement(setup, hw)
    return max(0, sum(bool(p.layers) or p.output for p in where.split(setup.gpus)) - 1)


def offloads(setup: Setup, hw: Hardware, pass_tokens: int) -> bool:
    """llama.cpp with a GPU runs the matmuls of what it left in RAM there in a pass of `pass_tokens` tokens
    (groups.op_offload): -ngl 0 included, as its scheduler still holds the GPU's backend."""
    return (
        isinstance(setup.engine, LlamaCppEngine) and not hw.cpu_only
        and bool(op_offload(backend_of(setup, hw), pass_tokens))
    )  # fmt: skip


def moe_layers(setup: Setup, weights: Weights | None = None) -> int:
    """Layers with routed experts, each running the router's and the experts' chain of kernels a pass; `weights`
    saves recounting them (as in predict)."""
    return sum(1 for experts, _ in (weights or setup_weights(setup)).layer_experts if experts)


def chained_layers(setup: Setup) -> int:
    """Layers whose state update the engine runs as a chain of small kernels (LayerKind.chained_update)."""
    return sum(any(part.chained_update for part in layer.parts()) for layer in setup.model.layers)


def driver(setup: Setup, hw: Hardware) -> str:
    """The device that drives each pass: the GPU whenever one takes part."""
    where = placement(setup, hw)
    return "gpu" if where.layers or where.output else "cpu"


def prompt_path(setup: Setup, hw: Hardware, chunk: int, moe: int) -> str:
    """The kernel path of groups.PATHS a prompt of `chunk` tokens a pass takes: a MoE model's prompt, and of those,
    experts that llama.cpp's CUDA or ROCm backend multiplies one GEMM per expert (float experts, groups.expert_loop;
    quantised ones on Volta, groups.volta_expert_loop); a dense model's prompt pipelined over llama.cpp's layer split
    (a split with layers in RAM has no pipeline: its group's error and split_caveat)."""
    if not moe:
        return SPLIT_PROMPT if pipeline(setup, hw) else ""
    on_gpu = isinstance(setup.engine, LlamaCppEngine) and driver(setup, hw) == "gpu"
    backend, fmt = backend_of(setup, hw), kernel_format(setup)
    looped = on_gpu and (
        expert_loop(backend, fmt, chunk, setup.model.hidden_size) or volta_expert_loop(setup.card, backend, fmt, chunk)
    )
    return EXPERT_LOOP if looped else MOE_PROMPT


def error_bars(setup: Setup, hw: Hardware, decode: Timing | None = None, chunk: int = 0) -> tuple[ErrorBar, ErrorBar]:
    """The held-out error of the group this setup falls in, for decode and for prefill; a decode step (`decode`)
    whose routed experts take Vulkan's tiled matmul, and a MoE model's prompt of `chunk` tokens a pass, carry their
    path's own error (groups.error_bar)."""
    device = driver(setup, hw)
    backend, klass = group(setup, hw, device)
    cal = kernel_calibration(setup, hw, device)
    engine, chained = setup.engine.name, chained_layers(setup)
    moe = decode.moe if decode else moe_layers(setup)
    path = TILED_EXPERTS if decode and any(p.expert_note for p in decode.parts) else ""
    label = cal.label if cal else ""
    decode_bar = error_bar(engine, backend, klass, "decode", label, chained, path, moe)
    prefill_bar = error_bar(engine, backend, klass, "prefill", label, chained, prompt_path(setup, hw, chunk, moe), moe)
    split = split_caveat(setup, hw) if device == "gpu" else ""

    def also(bar: ErrorBar, *more: str) -> ErrorBar:
        return replace(bar, caveat="; ".join(filter(None, (bar.caveat, split, *more))))

    reduces = tensor_parallel_caveat(setup, hw, _eff(None, setup, hw, device).tp)
    beyond = batch_caveat(decode) if decode else ""
    return also(decode_bar, reduces, driver_caveat(setup.card, backend), beyond), also(prefill_bar, reduces)


def batch_caveat(decode: Timing) -> str:
    """A decode step of more sequences than the runs its host cost per sequence (Efficiency.overhead_seq_s) was fitted
    on: that cost is carried on linearly, and not checked there."""
    e = decode.driver
    if e is None or not e.overhead_seq_s or decode.sequences <= e.max_batch:
        return ""
    return (
        f"its host cost per sequence ({e.overhead_seq_s * 1e3:.3g} ms a step) was fitted on steps of up to "
        f"{e.max_batch} sequences: at {decode.sequences} it is carried on, not checked"
    )


def tensor_parallel_caveat(setup: Setup, hw: Hardware, fitted_sizes: tuple[int, ...]) -> str:
    """What a figure rests on of tensor parallel: its all-reduces (tensor_parallel's, where it times any) are timed
    from published microbenchmarks (core.speed.allreduce), not fitted; and constants fitted on runs of other TP
    sizes (`fitted_sizes`, their Efficiency.tp) leave this size's step unchecked: vLLM on MI300X was fitted at TP 8
    alone, where the all-reduces' share of a step is not one GPU's."""
    parts = []
    if ar := tensor_parallel(setup, hw, len(setup.model.layers), 1):
        parts.append(f"its {ar.count} all-reduces a pass over {ar.tp} GPUs are timed from published microbenchmarks, "
                     "not fitted")  # fmt: skip
    if fitted_sizes and setup.tp not in fitted_sizes:
        sizes = ", ".join(map(str, fitted_sizes))
        parts.append(f"its group was fitted on runs at tensor parallel {sizes} only: at {setup.tp} it is not checked")
    return "; ".join(parts)


def split_caveat(setup: Setup, hw: Hardware) -> str:
    """What a GPU group's error does not cover of a step llama.cpp splits with the CPU: every held-out run had the
    whole model on the card (-ngl 99)."""
    where = placement(setup, hw)
    n = len(setup.model.layers)
    parts = []
    if where.on_cpu:
        parts.append(f"{len(where.on_cpu)} of {n} layers run on the CPU from system RAM (-ngl)")
    if where.cpu_experts and count_params(setup.model).experts:
        parts.append(f"the routed experts of {len(where.cpu_experts)} layers run on the CPU (--n-cpu-moe)")
    if not parts:
        return ""
    return " and ".join(parts) + ": no held-out run split a model so, and that part is not checked here"


def prefill_chunk(setup: Setup, context: int) -> int:
    """Prompt tokens per forward pass: llama.cpp's n_ubatch, vLLM's max_num_batched_tokens (chunked prefill);
    transformers runs the whole prompt at once."""
    engine = setup.engine
    if isinstance(engine, LlamaCppEngine):
        return max(1, min(engine.options.n_ubatch, engine.options.n_batch))
    if isinstance(engine, VllmEngine):
        return max(1, engine.served_on(setup.card).batched_tokens())
    return context


def _add(a: Timing, b: Timing) -> Timing:
    return Timing(
        a.parts + b.parts,
        a.overhead_s + b.overhead_s,
        a.passes + b.passes,
        a.layers,
        a.chained,
        a.driver,
        a.moe,
        a.hops,
        a.all_reduce,
        a.all_reduce_s + b.all_reduce_s,
        sequences=a.sequences,
    )


# a DevicePart's fields that add up over the spans of one prefill (the rest describe the device and its kernels)
ADDITIVE = ("weight_bytes", "cache_bytes", "matmul_flops", "attention_flops", "weights_s", "matmul_s", "cache_s",
            "attention_s", "expert_flops", "expert_bytes", "tile_bytes", "tile_s", "dequant_bytes",
            "dequant_s", "copy_bytes", "copy_s", "expert_weights_s", "expert_matmul_s")  # fmt: skip


def _merge(t: Timing) -> Timing:
    """Sum span parts per device so a prefill reads as one part per device (each span kept its own maxima); the
    GPU's own layers and the matmuls it runs for the layers in RAM (op offload) stay two parts."""
    merged: dict[tuple[str, bool], DevicePart] = {}
    for p in t.parts:
        key = (p.device, bool(p.copy_bytes))
        q = merged.get(key)
        if q is None:
            merged[key] = p
            continue
        # seconds stay additive: add the sides, then restore the larger side of each roofline in its own field
        merged[key] = replace(p, **{f: getattr(q, f) + getattr(p, f) for f in ADDITIVE})
    return replace(t, parts=tuple(merged.values()))


def prefill_spans(n_layers: int) -> int:
    """Spans a prompt's chunks are grouped into: PREFILL_SPANS, fewer past 1,024 layers (PREFILL_LAYER_SPANS)."""
    return max(1, min(PREFILL_SPANS, PREFILL_LAYER_SPANS // max(1, n_layers)))


def prefill_timing(
    setup: Setup, hw: Hardware, context: int, table: Table | None = None, weights: Weights | None = None
) -> tuple[Timing, int]:
    """One prompt of `context` tokens, `chunk` tokens per pass; chunks are grouped into ≤ PREFILL_SPANS spans, each
    timed as one roofline (its weights read once per chunk in it), so a long prompt costs a bounded amount of work."""
    chunk = prefill_chunk(setup, context)
    chunks = math.ceil(context / chunk)
    weights = weights or setup_weights(setup)
    total: Timing | None = None
    per_span = math.ceil(chunks / min(chunks, prefill_spans(len(setup.model.layers))))
    for first in range(0, chunks, per_span):
        start = first * chunk
        end = min(context, (first + per_span) * chunk)
        passes = math.ceil((end - start) / chunk)
        # serving engines (and kvscope's probe) run the output head on each pass's last position only
        work = prefill_work(setup.model, setup.engine, weights, start, end, setup.kv_dtype, chunk=chunk, logits=passes)
        t = _timing(work, setup, hw, True, table, passes=passes)
        total = t if total is None else _add(total, t)
    assert total is not None
    total = _merge(total)
    if (line := pipeline(setup, hw)) and total.passes > 1:
        saved = line.saved_s(total.seconds - total.overhead_s, total.overhead_s, total.passes)
        total = replace(total, pipeline=line, pipelined_s=saved)
    return total, chunk


def predict(
    setup: Setup,
    hw: Hardware,
    context: int,
    batch: int = 1,
    table: Table | None = None,
    weights: Weights | None = None,
) -> Speed:
    """`table` replaces entries of efficiencies.json (fitting does); `weights` saves recounting them per call."""
    if context <= 0 or batch <= 0:
        raise InputError(f"context and batch must be positive (got context={context}, batch={batch})")
    weights = weights or setup_weights(setup)
    work = decode_work(setup.model, setup.engine, weights, context, batch, setup.kv_dtype)
    decode = _timing(work, setup, hw, False, table)
    prefill, chunk = prefill_timing(setup, hw, context, table, weights)
    dec_err, pre_err = error_bars(setup, hw, decode, min(chunk, context))
    return Speed(context, batch, decode, prefill, chunk, decode_error=dec_err, prefill_error=pre_err)
