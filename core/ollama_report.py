"""Ollama on a card: the layer split and context its estimator chooses (core.engines.runtimes), kvscope's own
llama.cpp account of that same split, and how fast it then runs (core.speed).

The point is the step the estimator hides: a model that "loads" with 20 of 33 layers on the GPU reads the other 13
from system RAM every token, so the host's RAM bandwidth is an input here, with its source stated.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from core.engines.ollama_engine import (
    LAST_GO_ENGINE,
    LLAMA_RUNNER,
    OLLAMA_ENGINE,
    EngineLayout,
    cache_bytes,
    engine_layout,
    runner,
)
from core.engines.runtimes import (
    ESTIMATOR_VERSION,
    KV_BYTES,
    OLLAMA_KV_TYPES,
    OLLAMA_VERSION,
    OllamaSettings,
    OllamaSplit,
    estimate_kv_type,
    estimator_covers,
    gguf_arch,
    gguf_blocks,
    gguf_facts,
    llama_engine,
    ollama_layers,
    request_ctx,
    server_flash_attention,
    server_kv_type,
)
from core.errors import InputError
from core.fit import Fit, Setup, Solver, cache_in_ram, fit
from core.llamacpp_autofit import FitChoice, fit_params
from core.memory.gpus import Card
from core.memory.quant import gguf_type
from core.model.spec import ModelSpec
from core.speed import calibration
from core.speed.cli import calibrated_host, error_record, hardware
from core.speed.predict import Hardware, Speed, predict
from core.speed.report import speed_lines
from core.units import byte_amount, format_bytes, format_tokens, layer_span, plural

# The cards issue 13 asks about: 8, 12, 16 and 24 GB (names as in core/memory/data/gpus.csv).
DEFAULT_CARDS = (
    "GeForce RTX 4060 8GB",
    "GeForce RTX 3060 12GB",
    "GeForce RTX 4060 Ti 16GB",
    "GeForce RTX 4090 24GB",
)
# A typical desktop host: dual-channel DDR5-5600, 2 channels × 8 B per transfer × 5,600 MT/s = 89.6 GB/s, the
# theoretical peak. core.speed's fitted llama.cpp CPU efficiency (× 1.16) is relative to a numpy copy, which runs
# below the theoretical peak, so on this figure the RAM-resident share is timed optimistically: an upper bound.
TYPICAL_RAM_GB_S = 2 * 8 * 5600e6 / 1e9
TYPICAL_THREADS = 8  # an 8-core desktop CPU (Ollama chooses its own thread count; its rule is not modelled here)
TYPICAL_SOURCE = (
    f"typical desktop: dual-channel DDR5-5600, 2 × 8 B × 5,600 MT/s = {TYPICAL_RAM_GB_S:.1f} GB/s theoretical peak"
)
MEASURED = "measured"
DEFAULT_SETTINGS = OllamaSettings()  # every variable unset, num_ctx by the card


def host(ram_gb_s: float | str | None = None, threads: int | None = None) -> tuple[Hardware, str]:
    """The host that runs the layers left in RAM, and where its bandwidth comes from: None → the typical desktop
    above; "measured" → this machine (core.speed.ram, cached; threads default to every core); a number (or its
    text, as the CLI passes it) → as given."""
    if threads is not None and threads < 1:
        raise InputError(f"threads must be at least 1, got {threads}")
    if ram_gb_s is None:
        return Hardware(ram_gb_s=TYPICAL_RAM_GB_S, threads=threads or TYPICAL_THREADS), TYPICAL_SOURCE
    if ram_gb_s == MEASURED:  # this machine: its stored calibration (python -m core calibrate) where it has one
        cal = calibration.load()
        if cal is not None:
            return calibrated_host(cal, threads or cal.threads), cal.label
        return hardware(None, threads, cpu_only=False)
    if isinstance(ram_gb_s, str):
        try:
            ram_gb_s = float(ram_gb_s)
        except ValueError:
            raise InputError(f"RAM bandwidth is a number of GB/s or {MEASURED!r}, got {ram_gb_s!r}") from None
    if not math.isfinite(ram_gb_s) or ram_gb_s <= 0:
        raise InputError(f"RAM bandwidth must be a positive number of GB/s, got {ram_gb_s}")
    return hardware(ram_gb_s, threads or TYPICAL_THREADS, cpu_only=False)


@dataclass(frozen=True)
class OllamaRow:
    """One model on one card: Ollama's runner and choice, kvscope's account of it, the speed that follows."""

    model: str
    card: str
    card_memory_bytes: int
    free_bytes: int  # free GPU memory as Ollama logs it ("available"); the card's whole memory unless given
    runner: str  # the runner the latest release modelled gives the model (core.engines.ollama_engine)
    runner_why: str
    num_ctx: int  # per request, capped at the model's training context
    num_parallel: int
    kv_type: str  # what current Ollama's cache is (OLLAMA_KV_CACHE_TYPE as given: runtimes.server_kv_type)
    flash_attention: bool  # as current Ollama has llama-server run it (runtimes.server_flash_attention)
    # Current Ollama passes no -ngl, so llama-server's own fit (core.llamacpp_autofit) picks the layers the row's
    # account and speed use, and for MoE models which layers keep their experts in RAM
    layers: int  # on the GPU, the output layer counted as one
    blocks: int
    fit_note: str  # the fit's steps
    fit_cpu_experts: tuple[int, int] | None  # MoE: [first, last] layer whose routed experts the fit keeps in RAM
    # v0.12.10's estimateGPULayers; None where the Go engine loaded the model instead, or kvscope does not model it
    estimate_layers: int | None
    ollama_vram_bytes: int | None
    ollama_total_bytes: int | None
    ollama_kv_bytes: int | None
    ollama_graph_bytes: int | None
    kvscope_gpu_bytes: int  # kvscope's llama.cpp account of the split: weights + overhead + num_parallel caches
    kvscope_headroom_bytes: int
    # room for num_parallel sequences of num_ctx; None with every layer and its cache in system RAM (-ngl 0 or 1),
    # which kvscope does not size: the GPU holding only the output layer is no answer
    kvscope_fits: bool | None
    decode_tok_s: float  # one request, its cache at num_ctx
    prefill_tok_s: float  # a num_ctx-token prompt
    ttft_s: float
    bound: str
    ram_gb_s: float
    threads: int
    weights: str
    gpu_overhead: int  # OLLAMA_GPU_OVERHEAD, bytes
    # Ollama v0.24.0, the last release with its own Go engine: the runner it chose, and where that is the Go engine,
    # its layout (core.engines.ollama_engine; the graph a stand-in)
    go_runner: str
    go_runner_why: str
    go_layers: int | None
    go_kv_bytes: int | None
    go_graph_bytes: int | None
    go_vram_bytes: int | None
    split: OllamaSplit | None = field(repr=False, compare=False)
    fit: Fit = field(repr=False, compare=False)
    speed: Speed = field(repr=False, compare=False)

    @property
    def full(self) -> bool:
        return self.layers > self.blocks

    @property
    def offloaded(self) -> str:
        """As Ollama logs it: "offloaded 20/33 layers to GPU" (the output layer counts as one)."""
        return f"{self.layers}/{self.blocks + 1}"


def parse_free(text: str | None) -> int | None:
    """Free GPU memory as Ollama logs it (format.HumanBytes2, one decimal: "7.1 GiB"), rounded down to a byte;
    None or blank: not given."""
    if text is None or not str(text).strip():
        return None
    try:
        return int(byte_amount(str(text)))
    except InputError:
        what = f"cannot read free memory {str(text)[:40]!r}"
        raise InputError(f"{what}; write it as Ollama logs it, e.g. 7.1GiB, 900MiB") from None


def free_card(card: Card, free: int | None) -> Card:
    """The card as the split sees it: `free` bytes free (Ollama's "available"), else the whole card. The CUDA
    context kvscope counts is the runner's own, so it comes out of what Ollama saw free, as on a real load."""
    if free is None:
        return card
    if not 0 < free <= card.memory_bytes:
        raise InputError(
            f"free GPU memory {format_bytes(free)} must be positive and at most the {card.name}'s "
            f"{format_bytes(card.memory_bytes)}; give it as Ollama logs it, e.g. 7.1GiB, or leave that card out"
        )
    return replace(card, memory_bytes=free, basis=f"{format_bytes(free)} free of {format_bytes(card.memory_bytes)}")


def llama_setup(
    model: ModelSpec, card: Card, settings: OllamaSettings, weights: str, gpu_layers: int | None = None
) -> Setup:
    """llama.cpp as Ollama runs it (-np num_parallel, -b/-ub num_batch), its cache type, -ngl `gpu_layers`."""
    return Setup(
        model=model,
        engine=llama_engine(settings),
        card=card,
        weights=weights,
        kv_dtype=server_kv_type(settings),
        gpu_layers=gpu_layers,
    )


def go_engine_layout(
    model: ModelSpec, card: Card, settings: OllamaSettings, weights: str, num_ctx: int
) -> EngineLayout:
    """The Go engine's layout of `model` on `card` (its memory_bytes free) at v0.24.0. Its graph is measured by
    ggml's allocator; kvscope stands in its llama.cpp compute buffers for the same batch, fully offloaded."""
    blocks, output = gguf_blocks(model, weights)
    batch = min(num_ctx, settings.num_batch)  # llm/server.go NewLlamaServer: NumBatch = min(NumBatch, NumCtx)
    cache = cache_bytes(
        model.layers, gguf_arch(model), estimate_kv_type(model, settings), num_ctx, settings.num_parallel, batch
    )  # fmt: skip
    solver = Solver(llama_setup(model, card, settings, weights))
    graph = sum(item.bytes for item in solver.overhead(num_ctx, settings.num_parallel))
    return engine_layout(blocks, output, cache, card.memory_bytes, graph, settings.gpu_overhead)


def ollama_row(
    model: ModelSpec,
    card: Card,
    settings: OllamaSettings = DEFAULT_SETTINGS,
    weights: str = "q4_k_m",
    hw: Hardware | None = None,
    free: int | None = None,
) -> OllamaRow:
    """Ollama on a `card` with `free` bytes free (None: nothing else on it), checked and timed by kvscope."""
    hw = hw or host()[0]
    kv = server_kv_type(settings)  # first: a quantised cache without flash attention is refused before any fit
    placed = free_card(card, free)
    num_ctx = request_ctx(model, settings, card.memory_bytes)
    arch = gguf_arch(model)
    now, then = runner(arch), runner(arch, LAST_GO_ENGINE)
    # Current Ollama passes llama-server no -ngl, so its --fit places the layers (and routed experts) of every model.
    choice = _llama_server_fit(model, placed, settings, num_ctx, weights)
    # v0.12.10's estimateGPULayers, shown beside: it sized only the llama.cpp runner's loads (the Go engine measured)
    split = None
    if runner(arch, ESTIMATOR_VERSION).name == LLAMA_RUNNER and estimator_covers(model):
        split = ollama_layers(model, placed.memory_bytes, settings, weights, total_bytes=card.memory_bytes)
    blocks = len(model.layers)
    layers = choice.n_layers + 1 if choice.gpu_layers is None else choice.gpu_layers
    setup = replace(llama_setup(model, placed, settings, weights, choice.gpu_layers), cpu_experts=choice.cpu_experts)
    # llama-server gets -c num_ctx × np -np np with kv_unified off: np streams of num_ctx cells each, which is
    # kvscope's per-sequence cache num_parallel times over (core.engines.llamacpp, the "ollama" front end).
    result = fit(setup, [num_ctx])
    row = result.rows[0]
    need = row.weights_bytes + row.overhead_bytes + settings.num_parallel * row.cache_bytes
    speed = predict(setup, hw, num_ctx, 1)
    go = go_engine_layout(model, placed, settings, weights, num_ctx) if then.name == OLLAMA_ENGINE else None
    return OllamaRow(
        model=model.name,
        card=card.name,
        card_memory_bytes=card.memory_bytes,
        free_bytes=placed.memory_bytes,
        runner=now.name,
        runner_why=now.why,
        num_ctx=num_ctx,
        num_parallel=settings.num_parallel,
        kv_type=kv,
        flash_attention=server_flash_attention(settings),
        layers=layers,
        blocks=blocks,
        fit_note="; ".join(choice.steps),
        fit_cpu_experts=(choice.cpu_experts.start, choice.cpu_experts.stop - 1) if choice.cpu_experts else None,
        estimate_layers=split.layers if split else None,
        ollama_vram_bytes=split.vram_bytes if split else None,
        ollama_total_bytes=split.total_bytes if split else None,
        ollama_kv_bytes=split.kv_bytes if split else None,
        ollama_graph_bytes=split.graph_bytes if split else None,
        kvscope_gpu_bytes=need,
        kvscope_headroom_bytes=result.usable_bytes - need,
        kvscope_fits=None if cache_in_ram(result, row) else row.max_concurrency >= settings.num_parallel,
        decode_tok_s=speed.decode_tok_s,
        prefill_tok_s=speed.prefill_tok_s,
        ttft_s=speed.ttft_s,
        bound=speed.bound,
        ram_gb_s=hw.ram_gb_s,
        threads=hw.threads,
        weights=weights,
        gpu_overhead=settings.gpu_overhead,
        go_runner=then.name,
        go_runner_why=then.why,
        go_layers=go.layers if go else None,
        go_kv_bytes=go.cache_bytes if go else None,
        go_graph_bytes=go.graph_bytes if go else None,
        go_vram_bytes=go.vram_bytes if go else None,
        split=split,
        fit=result,
        speed=speed,
    )


def _llama_server_fit(model: ModelSpec, card: Card, settings: OllamaSettings, num_ctx: int, weights: str) -> FitChoice:
    """-ngl as current Ollama gets it: -c num_ctx × np -np np and no -ngl (llm/llama_server.go), so llama-server's
    --fit chooses, with its default 1 GiB margin (and for MoE models which layers keep their experts in RAM)."""
    np = settings.num_parallel
    try:
        return fit_params(llama_setup(model, card, settings, weights), num_ctx * np, np)
    except InputError as err:
        raise InputError(f"{model.name} on {card.name}: llama-server's fit is not modelled here: {err}") from None


def ollama_grid(
    models: Iterable[ModelSpec],
    cards: Iterable[Card],
    settings: OllamaSettings = DEFAULT_SETTINGS,
    weights: str = "q4_k_m",
    hw: Hardware | None = None,
    free: int | None = None,
) -> list[OllamaRow]:
    """ollama_row for every model on every card, model by model, each card with `free` bytes free (None: empty)."""
    gguf_type(weights, "Ollama")
    hw = hw or host()[0]
    cards = list(cards)
    return [ollama_row(m, c, settings, weights, hw, free) for m in models for c in cards]


def row_record(row: OllamaRow) -> dict:
    """The JSON fields of a row (`python -m core ollama --json`); the split, fit and speed objects stay behind."""
    out = {name: getattr(row, name) for name in OllamaRow.__dataclass_fields__ if name not in ("split", "fit", "speed")}
    out["offloaded"] = row.offloaded
    out["full_offload"] = row.full
    # the held-out error of the speed figures' group (core.speed.groups), as `python -m core speed --json` gives it
    out["decode_error"] = error_record(row.speed.decode_error)
    out["prefill_error"] = error_record(row.speed.prefill_error)
    return out


def error_short(e: dict | None) -> str:
    """A figure's error bar in a table cell: '±8 %', '±8 % *' where its group's held-out runs do not cover all of it
    (layers or experts on the CPU, MoE or DeltaNet layers where they had none; its label says what), or 'not checked'
    when its group has no held-out run."""
    if e is None or e["median_abs_error"] is None:
        return "not checked"
    return f"±{e['median_abs_error'] * 100:.0f} %{' *' if e.get('caveat') else ''}"


SPEED_AT = (
    "one request: decode with num_ctx tokens cached (the window Ollama allocated, full); prefill of a "
    "num_ctx-token prompt"
)
# what OLLAMA_GPU_OVERHEAD changes in the release kvscope follows (read from its source, not run)
GPU_OVERHEAD_NOTE = (
    f"OLLAMA_GPU_OVERHEAD: Ollama {OLLAMA_VERSION} subtracts it only when it picks the default num_ctx from the "
    "cards' total memory (server/routes.go) and in a log line (server/sched.go); llama-server's --fit, which places "
    "the layers, is not told of it (llm/llama_server.go sets no fit target but a vision projector's), so the "
    f"'layers' column does not move with it; the '{ESTIMATOR_VERSION}' and 'Go engine' columns, whose releases "
    "subtracted it from the free memory, do"
)
UNCHECKED = (
    f"Ollama {OLLAMA_VERSION} runs every model on llama-server and passes no -ngl, so 'layers' is llama-server's "
    f"--fit (common/fit.cpp); '{ESTIMATOR_VERSION}' is that release's estimateGPULayers where it sized the load (the "
    f"llama.cpp runner's attention-only models); 'Go engine' is {LAST_GO_ENGINE}'s own engine, its graph a stand-in "
    "(kvscope's llama.cpp compute buffers); all read from source, none checked against a running Ollama"
)


def report(
    models: Iterable[ModelSpec],
    cards: Iterable[Card],
    settings: OllamaSettings,
    weights: str,
    hw: Hardware,
    ram_source: str,
    free: int | None = None,
) -> dict:
    """What `python -m core ollama` prints: the settings, the host and a row per model and card."""
    rows = ollama_grid(models, cards, settings, weights, hw, free)
    return {
        "ollama_version": OLLAMA_VERSION,
        "estimator_version": ESTIMATOR_VERSION,
        "weights": weights,
        "settings": {
            "num_ctx": settings.num_ctx,
            "num_parallel": settings.num_parallel,
            "kv_cache_type": settings.kv_cache_type,
            "flash_attention": settings.flash_attention,
            "gpu_overhead": settings.gpu_overhead,
            "num_batch": settings.num_batch,
            "free": free,
        },
        "ram_gb_s": hw.ram_gb_s,
        "ram_source": ram_source,
        "threads": hw.threads,
        "speed_at": SPEED_AT,
        "note": UNCHECKED,
        "rows": [row_record(r) for r in rows],
    }


def print_report(out: dict) -> None:
    s = out["settings"]
    ctx = "Ollama's default for the card" if s["num_ctx"] is None else format_tokens(s["num_ctx"])
    free = "the whole card" if s["free"] is None else format_bytes(s["free"])
    print(
        f"Ollama {out['ollama_version']}, weights {out['weights']}, num_ctx {ctx}, "
        f"OLLAMA_NUM_PARALLEL {s['num_parallel']}, OLLAMA_KV_CACHE_TYPE {s['kv_cache_type']}, OLLAMA_GPU_OVERHEAD "
        f"{format_bytes(s['gpu_overhead'])}, free GPU memory {free}"
    )
    print(f"host RAM {out['ram_gb_s']:.1f} GB/s ({out['ram_source']}), {plural(out['threads'], 'thread')}")
    print(f"speed: {out['speed_at']}")
    print(f"note: {out['note']}")
    if s["gpu_overhead"]:
        print(f"note: {GPU_OVERHEAD_NOTE}")
    head = f"{'model':<34} {'card':<30} {'runner':<12} {'num_ctx':>7} {'KV':>4} {'layers':>6} "
    print(
        head + f"{'kvscope GPU':>11} {'fits':>4} {'decode tok/s':>12} {'prefill tok/s':>13} {'±decode':>11} "
        f"{ESTIMATOR_VERSION:>8} {'its VRAM':>9} {'Go engine':>9}  experts in RAM"
    )
    for r in out["rows"]:
        estimate, blocks = r["estimate_layers"], r["blocks"] + 1
        go = f"{r['go_layers']}/{blocks}" if r["go_layers"] is not None else "-"
        print(
            f"{r['model'][:34]:<34} {r['card'][:30]:<30} {r['runner']:<12} {format_tokens(r['num_ctx']):>7} "
            f"{r['kv_type']:>4} {r['offloaded']:>6} "
            f"{format_bytes(r['kvscope_gpu_bytes']):>11} {FITS_TEXT[r['kvscope_fits']]:>4} "
            f"{r['decode_tok_s']:>12.1f} {r['prefill_tok_s']:>13.0f} {error_short(r['decode_error']):>11} "
            f"{f'{estimate}/{blocks}' if estimate is not None else '-':>8} "
            f"{format_bytes(r['ollama_vram_bytes']) if estimate is not None else '-':>9} {go:>9}"
            + (f"  {layer_span(*r['fit_cpu_experts'])}" if r["fit_cpu_experts"] else "")
        )
    if any((r["decode_error"] or {}).get("caveat") for r in out["rows"]):
        print("*: the group's held-out runs do not cover all of this figure; its error bar line below says what")
    bars = {(r["decode_error"]["label"], r["prefill_error"]["label"]) for r in out["rows"] if r["decode_error"]}
    for decode, prefill in sorted(bars):
        print(f"error bar: decode {decode}; prefill {prefill}")
    for model in dict.fromkeys(r["model"] for r in out["rows"]):
        r = next(r for r in out["rows"] if r["model"] == model)
        print(f"{model}: {r['runner']}: {r['runner_why']}. At {LAST_GO_ENGINE}: {r['go_runner_why']}.")


FITS_TEXT = {True: "yes", False: "no", None: "RAM"}


def in_ram(row: OllamaRow) -> str:
    """What a partly offloaded split leaves unsized: the layers in system RAM and their cache."""
    left = row.blocks + 1 - row.layers
    if row.full or row.kvscope_fits is None or left <= 0:
        return ""
    return f"; the GPU's part only: {left} of {row.blocks + 1} layers and their cache stay in system RAM, not sized"


FITS_SENTENCE = {
    True: "fits",
    False: "does not fit the card",
    None: "every layer and its cache in system RAM, which kvscope does not size",
}


def explain(row: OllamaRow, model: ModelSpec) -> list[str]:
    """Markdown lines: the runner and why, each figure of the row with the terms and kvscope's account behind it."""
    n = row.blocks
    fit_row = row.fit.rows[0]
    ngl = "all" if row.full else row.layers
    return [
        f"### {row.model} on {row.card} ({format_bytes(row.free_bytes)} free of {format_bytes(row.card_memory_bytes)})",
        f"**Runner**: {row.runner}, because {row.runner_why}.",
        f"**Current Ollama** passes -c num_ctx × np -np np and no -ngl (llm/llama_server.go @{OLLAMA_VERSION}), so "
        f"llama-server's --fit chooses (common/fit.cpp, 1 GiB left free): {row.fit_note}; -ngl {ngl} of {n + 1}",
        *(_estimate_lines(row, model) if row.split else []),
        f"**kvscope's llama.cpp account of that split** (-ngl {ngl}, -c "
        f"{row.num_ctx * row.num_parallel:,} -np {row.num_parallel}, cache {row.kv_type}, flash attention "
        f"{'on' if row.flash_attention else 'off'}):",
        f"- weights on the GPU {format_bytes(fit_row.weights_bytes)} + "
        + "".join(f"{item.label} {format_bytes(item.bytes)}{item.basis_note} + " for item in fit_row.overhead)
        + f"{row.num_parallel} × cache {format_bytes(fit_row.cache_bytes)} = "
        f"**{format_bytes(row.kvscope_gpu_bytes)}** of {format_bytes(row.fit.usable_bytes)}: "
        f"{FITS_SENTENCE[row.kvscope_fits]} (headroom {format_bytes(row.kvscope_headroom_bytes)}){in_ram(row)}",
        f"**Speed** on a host with {row.ram_gb_s:.1f} GB/s RAM and {plural(row.threads, 'thread')} for the layers in "
        "RAM:",
        *speed_lines(row.speed),
        *_go_engine_lines(row),
    ]


def _estimate_lines(row: OllamaRow, model: ModelSpec) -> list[str]:
    """v0.12.10's estimateGPULayers, term by term."""
    split = row.split
    assert split is not None and split.terms is not None  # ollama_layers always records its terms
    t = split.terms
    f = gguf_facts(model, row.weights)
    n = len(t.blocks)
    k = min(split.layers, n)  # blocks on the GPU: the last k
    placed = sum(t.blocks[i] + t.kv_per_layer[i] for i in range(n - k, n))
    output = t.output if split.full else 0
    reserve = row.gpu_overhead + t.graph + t.minimum + 2 * t.buffer
    return [
        f"**Ollama's estimate** (llm/memory.go estimateGPULayers at {ESTIMATOR_VERSION}, the llama.cpp runner's "
        f"split until v0.12.11), num_ctx {row.num_ctx:,} × OLLAMA_NUM_PARALLEL {row.num_parallel} = {t.context:,} "
        f"tokens, batch {t.batch}, weights {row.weights}:",
        f"- KV per layer: {t.context:,} × ({f.key_length} + {f.value_length}) × {f.heads_kv} KV heads × "
        f"{KV_BYTES[t.kv_type]:g} B ({t.kv_type}) = {t.kv_per_layer[0]:,} B; all {n} layers: "
        f"{format_bytes(t.kv_total)}"
        + (
            f" (OLLAMA_KV_CACHE_TYPE {row.kv_type} needs flash attention, which {ESTIMATOR_VERSION} left off for "
            f"{gguf_arch(model)} unless OLLAMA_FLASH_ATTENTION was set: f16)"
            if t.kv_type != row.kv_type
            else ""
        ),
        f"- buffer block held back: blk.0 ({format_bytes(t.blocks[0])}) + its KV = {format_bytes(t.buffer)}",
        f"- graph: partial offload {format_bytes(t.graph_partial)}, full offload {format_bytes(t.graph_full)}; every "
        f"placement test reserves the larger, {format_bytes(t.graph)}",
        f"- minimum memory (CUDA): {format_bytes(t.minimum)}",
        f"- the GPU is used only if free ≥ OLLAMA_GPU_OVERHEAD + graph + minimum + 2 × buffer = "
        f"{format_bytes(row.gpu_overhead)} + {format_bytes(t.graph)} + {format_bytes(t.minimum)} + 2 × "
        f"{format_bytes(t.buffer)} = {format_bytes(reserve)}: "
        + ("yes" if row.free_bytes >= reserve else "no, so every layer stays in RAM"),
        f"- blocks placed from the last down while free > overhead + used + graph + block: {k} of {n}"
        + (f", then the output layer ({format_bytes(t.output)})" if split.full else "; the output layer stays in RAM"),
        f"- VRAM estimate = minimum + buffer + blocks placed + output + graph used = {format_bytes(t.minimum)} + "
        f"{format_bytes(t.buffer)} + {format_bytes(placed)} + {format_bytes(output)} + "
        f"{format_bytes(split.graph_bytes)} = **{format_bytes(split.vram_bytes)}**"
        + ("" if split.layers else " (no layers: no VRAM estimate)")
        + f"; with what stays in RAM, {format_bytes(split.total_bytes)} in all",
    ]


def _go_engine_lines(row: OllamaRow) -> list[str]:
    """The runner at v0.24.0 and, where it is the Go engine, its layout."""
    head = (
        f"**At {LAST_GO_ENGINE}** (the last release with Ollama's own engine): {row.go_runner}, because "
        f"{row.go_runner_why}."
    )
    if row.go_layers is None or row.go_kv_bytes is None or row.go_graph_bytes is None or row.go_vram_bytes is None:
        return [head]
    return [
        head,
        f"- cache (kvcache/causal.go and recurrent.go: cells padded to 256, sliding windows of their memory + one "
        f"batch, recurrent states F32 with 24 checkpoints): {format_bytes(row.go_kv_bytes)} for all {row.blocks} "
        "layers",
        f"- graph: measured by the runner; stand-in {format_bytes(row.go_graph_bytes)} (kvscope's llama.cpp compute "
        "buffers for the same batch)",
        f"- layers from the last down into free - graph - 457 MiB - OLLAMA_GPU_OVERHEAD (llm/server.go buildLayout, "
        f"assignLayers): offloaded {row.go_layers}/{row.blocks + 1}, "
        f"{format_bytes(row.go_vram_bytes)} on the GPU",
    ]


# --- Fit a card with the "ollama" front end: what Ollama itself would do with the page's inputs ----------------

# Fit a card's llama.cpp KV types as OLLAMA_KV_CACHE_TYPE; "auto" is Ollama's default, f16. Others have no setting.
FIT_CARD_KV = {"auto": "f16", "f16": "f16", "fp16": "f16", "q8_0": "q8_0", "q4_0": "q4_0"}


def fit_card_settings(setup: Setup, context: int) -> OllamaSettings:
    """Fit a card's inputs as Ollama takes them: num_ctx = the page's context, its KV type as OLLAMA_KV_CACHE_TYPE,
    every other variable unset (OLLAMA_NUM_PARALLEL 1, as the "ollama" front end has it)."""
    if setup.kv_dtype not in FIT_CARD_KV:
        raise InputError(f"KV type {setup.kv_dtype} has no OLLAMA_KV_CACHE_TYPE ({', '.join(OLLAMA_KV_TYPES)})")
    return OllamaSettings(num_ctx=context, kv_cache_type=FIT_CARD_KV[setup.kv_dtype])


def fit_card_row(setup: Setup, context: int, hw: Hardware | None = None) -> OllamaRow:
    """ollama_row for Fit a card's setup at its context: the split Ollama chooses itself (num_gpu unset, so a -ngl
    or --n-cpu-moe set on the page does not reach it), on the Ollama page's default host unless `hw` is given."""
    if setup.gpus != 1:
        raise InputError("Ollama's split is modelled for one GPU")
    if setup.weights is None:
        raise InputError("Ollama runs a GGUF: pick its weight format")
    return ollama_row(setup.model, setup.card, fit_card_settings(setup, context), setup.weights, hw)


def ollama_sentence(setup: Setup, context: int) -> tuple[str, bool]:
    """What Ollama itself does with Fit a card's inputs at `context` (its own split, on the Ollama page's default
    host), and whether that is every layer on the GPU and fitting; what stops it being worked out otherwise."""
    try:
        row = fit_card_row(setup, context)
    except InputError as err:
        return f"Ollama's own split is not worked out here: {err}.", True
    return runtime_line(row), row.full and row.kvscope_fits is True


def runtime_line(row: OllamaRow) -> str:
    """One sentence for Fit a card: the split current Ollama gets (llama-server's --fit) and its speed."""
    total = row.blocks + 1
    placed = f"all {total} layers" if row.full else f"{row.layers} of {total} layers"
    line = (
        f"Ollama would offload {placed} to the GPU (its log: offloaded {row.offloaded}; num_ctx "
        f"{format_tokens(row.num_ctx)}, KV {row.kv_type}: it leaves -ngl to llama-server's --fit), decode "
        f"~{row.decode_tok_s:.1f} tok/s"
    )
    if row.fit_cpu_experts:
        line += f", the routed experts of {layer_span(*row.fit_cpu_experts)} in system RAM"
    if row.kvscope_fits is not True:
        line += f"; kvscope's llama.cpp account of that split: {FITS_SENTENCE[row.kvscope_fits]}"
    return line + f" (layers in RAM at {row.ram_gb_s:.1f} GB/s, {plural(row.threads, 'thread')})."
