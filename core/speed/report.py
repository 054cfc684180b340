"""Speed figures for the app: a column per context table row, curves over context, and 'How is this computed?'
lines whose numbers are the ones core.speed used."""

from __future__ import annotations

import math
from decimal import Decimal

from core.errors import InputError
from core.fit import Fit, Setup
from core.speed.efficiency import OVERHEAD_TERMS, Efficiency, decode_basis, overhead_rates
from core.speed.groups import MMQ_ROWS, ErrorBar, mmq_tile
from core.speed.predict import DevicePart, Hardware, Speed, Timing, predict, setup_weights
from core.units import format_bytes, format_tokens, plural


def table_speeds(fit: Fit, hw: Hardware) -> list[dict]:
    """Per row of a fit: decode tok/s of one sequence, and the aggregate with as many sequences as fit at once (as
    vLLM's scheduler takes, where --max-num-seqs bounds them)."""
    setup = fit.setup
    weights = setup_weights(setup)
    out = []
    for row in fit.rows:
        one = predict(setup, hw, row.context, 1, weights=weights)
        n = row.max_concurrency
        batch = 1 if not row.fits or n == float("inf") else max(1, row.max_num_seqs or math.floor(n))
        many = predict(setup, hw, row.context, batch, weights=weights) if batch > 1 else one
        out.append(
            {
                "context": row.context,
                "decode_tok_s": one.decode_tok_s if row.fits else None,
                "aggregate_tok_s": many.aggregate_tok_s if row.fits else None,
                "aggregate_batch": batch if row.fits else 0,
                "ttft_s": one.ttft_s,
                "bound": one.bound,
                "decode_error": error_label(one.decode_error),
                "aggregate_error": error_label(many.decode_error),  # its own where many sequences take another kernel
                "prefill_error": error_label(one.prefill_error),
            }
        )
    return out


def error_note(rows: list[dict]) -> str:
    """The table's decode error bar (its first row's), and the aggregate's where many sequences at once take a kernel
    path with an error of its own (groups.PATHS: e.g. Vulkan's tiled matmul for experts past 8 tokens)."""
    if not rows:
        return ""
    decode = rows[0]["decode_error"]
    others = sorted({r["aggregate_error"] for r in rows if r["aggregate_batch"] > 1} - {decode})
    return f" Decode error bar: {decode}." + "".join(f" Aggregate error bar: {o}." for o in others)


def error_label(e: ErrorBar | None) -> str:
    return e.label if e is not None else "not checked"


def speed_or_none(fit: Fit, hw: Hardware) -> tuple[list[dict] | None, str]:
    """table_speeds, or why there are none (a custom card has no bandwidth or peak to time it by)."""
    try:
        return table_speeds(fit, hw), ""
    except InputError as err:
        return None, str(err)


def curve(setup: Setup, hw: Hardware, contexts: list[int]) -> list[dict]:
    """Decode tok/s (one sequence) and time to first token over context, for a chart."""
    weights = setup_weights(setup)
    rows = []
    for n in contexts:
        s = predict(setup, hw, n, 1, weights=weights)
        rows.append(
            {"context": n, "decode_tok_s": s.decode_tok_s, "ttft_s": s.ttft_s, "bound": s.bound,
             "decode_error": error_label(s.decode_error), "prefill_error": error_label(s.prefill_error)}
        )  # fmt: skip
    return rows


def _s(seconds: float) -> str:
    return f"{seconds:.6f} s"


def _plain(x: float) -> str:
    """Six significant digits without an exponent: the formula check reads each term as a number, and a per-layer
    overhead of tens of µs would otherwise print as 4.3e-05."""
    return format(Decimal(f"{x:.6g}"), "f")


def _n(x: float) -> str:
    return f"{round(x):,}"


def _threads(p: DevicePart) -> str:
    """A CPU part's thread count (its peak is threads: its rates are per thread)."""
    return plural(p.peak_gflops, "thread", f"{p.peak_gflops:g}")


def _rates(p: DevicePart, prefill: bool) -> tuple[str, str, str]:
    """(bandwidth, matmul rate, attention rate) in SI units, as the formulas print them (they evaluate as printed)."""
    e = p.efficiency
    # the rates used: the efficiency times the format family's factor and the GEMM fill (prefill), or this host's
    # calibrated rate; the attention's without flash attention (efficiencies' flash_off)
    mm = p.matmul_gflops / p.peak_gflops if p.peak_gflops else 0.0
    at = p.attention_gflops / p.attention_peak_gflops if p.attention_peak_gflops else 0.0
    bw = f"{_n(p.bandwidth_gb_s * 1e9)} B/s × {e.bandwidth:.4g}"
    if p.device == "cpu":  # CPU rates are effective GFLOP/s per thread
        return (
            bw,
            f"{_threads(p)} × {_n(mm * 1e9)} FLOP/s",
            f"{_threads(p)} × {_n(at * 1e9)} FLOP/s",
        )
    return bw, f"{_n(p.peak_gflops * 1e9)} FLOP/s × {mm:.4g}", f"{_n(p.attention_peak_gflops * 1e9)} FLOP/s × {at:.4g}"


def fill_text(e: Efficiency) -> str:
    """The prompt GEMMs' fill curves (core.speed.predict.fill), where the entry has one: a pass of n tokens runs its
    matmuls at n ÷ (n + half) of the rate; a routed expert, by the tokens routed to it over the columns its kernel
    computes (core.speed.groups.expert_columns), on its own curve if fitted."""
    if not e.prefill_half_tokens:
        return ""
    text = f"; prompt matmuls fill as n ÷ (n + {e.prefill_half_tokens:.3g}) for n tokens a pass"
    if e.expert_half_tokens:
        text += (
            f", a routed expert's as n ÷ (c + {e.expert_half_tokens:.3g}) for n tokens routed to it run as c columns"
            " (c is n unless the matmuls below say they are padded)"
        )
    return text


def overhead_text(t: Timing) -> str:
    """The engine's overhead, as passes × what each pass costs (the driving device's efficiency)."""
    e = t.driver
    if e is None:
        return _s(t.overhead_s)
    terms = [f"{_plain(e.overhead_step_s)} s"]
    terms += [
        f"{n} {one if n == 1 else many} × {_plain(getattr(e, field))} s"
        for (field, one, many), n in zip(OVERHEAD_TERMS, t.counts, strict=True)
        if n and getattr(e, field)
    ]
    return f"{t.passes} pass{'es' if t.passes > 1 else ''} × ({' + '.join(terms)}) = {_s(t.overhead_s)}"


def all_reduce_lines(t: Timing) -> list[str]:
    """Tensor parallel's all-reduces (core.speed.allreduce), a pass's worked out and all passes' total; none on one
    GPU."""
    if t.all_reduce is None:
        return []
    passes = f"; all {t.passes} passes: {_s(t.all_reduce_s)}" if t.passes > 1 else ""
    return [f"- tensor parallel, a pass: {t.all_reduce.text()}{passes}"]


def pipeline_lines(t: Timing) -> list[str]:
    """llama.cpp's pipeline over its layer split (predict.Pipeline): what overlapping a prompt's passes saves."""
    line = t.pipeline
    if line is None:
        return []
    n = t.passes
    device = t.seconds + t.pipelined_s - t.overhead_s  # every pass's device time, one after another
    step = line.step_s(device / n, t.overhead_s / n)
    return [
        f"- pipelined over {line.gpus} GPUs (llama.cpp's layer split): each of the {n - 1:,} passes after the first "
        f"costs the longer of the busiest GPU's share of a pass's device time ({line.busiest} of the {line.layers} "
        f"layers: {line.busiest} ÷ {line.layers} × {_s(device)} ÷ {n:,}) and a pass's overhead, which the CPU "
        f"spends on it alone ({_s(t.overhead_s)} ÷ {n:,}): {_s(step)}; saved ({n:,} − 1) × (({_s(device)} + "
        f"{_s(t.overhead_s)}) ÷ {n:,} − {_s(step)}) = {_s(t.pipelined_s)}"
    ]


def _timed(seconds: float, text: str) -> str:
    """A term of a device's line, "text = seconds; ", or "" where the term is not timed (0 s)."""
    return f"{text} = {_s(seconds)}; " if seconds else ""


def tiles_text(p: DevicePart, bw: str) -> str:
    """A prompt's MMQ tile traffic as timed (groups.mmq_traffic_bytes), or "" where it is not."""
    return _timed(
        p.tile_s,
        f"MMQ's tiles: {_n(p.tile_bytes)} B (the weights once per {mmq_tile(p.pass_tokens)}-column tile, the "
        f"activations once per {MMQ_ROWS}-row tile) × {p.efficiency.tile_traffic:.3g} (the share of it no fitted run "
        f"beat) ÷ ({bw})",
    )


def experts_text(p: DevicePart) -> str:
    """The routed experts' share of the weights and matmuls above: their own kernel (mul_mat_id), with its own
    roofline beside the dense matmuls' (DevicePart.rooflines_s), or "" where the model routes none."""
    if not p.expert_matmul_s:
        return ""
    dense_read, dense_flops = p.dense_sides
    if p.matvec:  # read and FLOPs added (groups.CUDA_MATVEC_WHY)
        sides = f"({_s(dense_read)} + {_s(dense_flops)}) + ({_s(p.expert_weights_s)} + {_s(p.expert_matmul_s)})"
    else:
        sides = f"max({_s(dense_read)}, {_s(dense_flops)}) + max({_s(p.expert_weights_s)}, {_s(p.expert_matmul_s)})"
    return (
        f"of which the routed experts' own kernel: {_n(p.expert_bytes)} B = {_s(p.expert_weights_s)}, "
        f"{_n(p.expert_flops)} FLOP = {_s(p.expert_matmul_s)}, and the dense ones' {_s(dense_read)} and "
        f"{_s(dense_flops)}: {sides} = {_s(p.rooflines_s)}; "
    )


def copy_text(p: DevicePart) -> str:
    """Weights in host memory copied to the GPU before their matmuls (groups.op_offload), or "" where none are."""
    if not p.copy_s:
        return ""
    return _timed(
        p.copy_s,
        f"copy over PCIe ({p.copy_note}; PCIe 4.0 ×16's 31.5 GB/s at an assumed 80 % unless given, not checked): "
        f"{_n(p.copy_bytes)} B ÷ ({_n(p.copy_bytes / p.copy_s)} B/s)",
    )


def dequant_text(p: DevicePart, bw: str) -> str:
    """The weights' conversion to FP16 for cuBLAS as timed (groups.fp16_dequant), or "" where there is none."""
    return _timed(
        p.dequant_s,
        f"FP16 conversion ({p.dequant_note}): {_n(p.dequant_bytes)} B (the quantised weights read, FP16 written) ÷ "
        f"({bw} × {p.efficiency.dequant_bandwidth:.4g})",
    )


def matmul_sides(p: DevicePart) -> str:
    """How a device's weight matmuls are timed (DevicePart.matmuls_s), in words."""
    if p.matvec:
        return "weights plus matmuls"
    return f"the slower of weights{', their tiles' if p.tile_s else ''} and matmuls"


def part_lines(t: Timing, prefill: bool) -> list[str]:
    out = []
    for p in t.parts:
        bw, mm, at = _rates(p, prefill)
        # the cache stream this host's calibration measured or its ISA's fit gives, per thread as the other rates
        cache = f"{_threads(p)} × {_n(p.cache_gb_s / p.peak_gflops * 1e9)} B/s" if p.cache_gb_s else bw
        streamed = f" (streamed {p.cache_note})" if p.cache_note else ""
        read = f"{_n(p.weight_bytes)} B ÷ ({bw})"
        if p.expert_bytes and p.efficiency.expert_bandwidth != 1:  # routed experts at their own share (efficiency)
            read = (
                f"{_n(p.weight_bytes - p.expert_bytes)} B ÷ ({bw}) + {_n(p.expert_bytes)} B of routed experts ÷ "
                f"({bw} × {p.efficiency.expert_bandwidth:.4g})"
            )
        matmuls = (
            f"{dequant_text(p, bw)}weights and state: {read} = {_s(p.weights_s)}; {tiles_text(p, bw)}matmuls: "
            f"{_n(p.matmul_flops)} FLOP ÷ ({mm}) = {_s(p.matmul_s)}; {experts_text(p)}"
            if p.matmul_flops or p.weight_bytes
            else "weight matmuls: on the GPU (llama.cpp's op offload, below); "
        )
        out.append(
            f"- {p.device.upper()} ({p.layers} layers{' in system RAM: their matmuls' if p.copy_s else ''}) — "
            f"{copy_text(p)}{matmuls}"
            + (
                f"cache: {_n(p.cache_bytes)} B ÷ ({cache}) = {_s(p.cache_s)}{streamed}; "
                f"attention: {_n(p.attention_flops)} FLOP ÷ ({at}) = {_s(p.attention_s)}; "
                if not p.copy_s
                else "the attention: with its cache in system RAM (above); "
            )
            + "on this device: "
            f"{_s(p.seconds)} ({'the copy plus ' if p.copy_s else ''}"
            f"{'the FP16 conversion plus ' if p.dequant_s else ''}{matmul_sides(p)}"
            f"{', the dense ones and the routed experts each on their own,' if p.expert_matmul_s else ''} plus "
            "the slower of cache and attention)"
            + (
                f"; the matmuls' peak is {p.peak_gflops / p.attention_peak_gflops:.2g}× the card's listed one: "
                f"{p.peak_note}"
                if p.peak_note
                else ""
            )
            + (f"; the matmul rate has the {p.family_note}" if p.family_note and p.matmul_flops else "")
            + (f"; the attention's peak is below the card's listed one: {p.attention_note}" if p.attention_note else "")
            + (
                f"; the routed experts' matmuls run as the prompt's tiled GEMM: {p.expert_note}"
                if p.expert_note
                else ""
            )
            + (f"; {p.tile_note}" if p.tile_note else "")
            + (f"; {p.bandwidth_note}" if p.bandwidth_note else "")
        )
    return out


HOW_FAR_OFF = "**How far off this can be** (held-out published runs, tests/bench/fit_corpus.py)"


def speed_lines(s: Speed, prefill: bool = True) -> list[str]:
    """Every term of one prediction, with the efficiencies used and where they come from; without `prefill`, its
    decode step and that step's error bar only (another batch beside a full explanation: the prompt is the same)."""
    out = [
        f"### Speed at {format_tokens(s.context)} tokens, {s.batch} sequence{'s' if s.batch > 1 else ''}",
        "Each pass runs its kernels one after another, each as fast as its slower side allows: the weight "
        "matmuls (max of weights ÷ bandwidth, FLOPs ÷ rate, the routed experts' apart from the dense ones', and on "
        "CUDA prompts of quantised weights the traffic of llama.cpp's MMQ tiles; llama.cpp's CUDA mat-vec kernels, "
        "a pass of up to 8 tokens, take both sides in turn, FLOPs at the FP32 rate) and the attention (max of cache "
        "÷ bandwidth, FLOPs ÷ rate); "
        "devices a pass crosses add up, and the engine's per-pass overhead comes on top.",
        f"**Decode step** ({format_bytes(round(s.bytes_per_step))} read, {s.decode.flops:,.0f} FLOP):",
    ]
    out += part_lines(s.decode, prefill=False) + all_reduce_lines(s.decode)
    out.append(
        f"- overhead: {overhead_text(s.decode)}; step: {_s(s.decode.seconds)} ({s.bound}-bound); per sequence: "
        f"1 ÷ {_s(s.decode.seconds)} = {s.decode_tok_s:,.2f} tok/s; all sequences: {s.batch} × "
        f"{s.decode_tok_s:,.2f} tok/s = {s.aggregate_tok_s:,.2f} tok/s"
    )
    if not prefill:
        return [*out, f"{HOW_FAR_OFF}: decode {error_label(s.decode_error)}."]
    chunks = math.ceil(s.context / s.chunk)
    out.append(
        f"**Prefill** of {s.context:,} tokens in {chunks:,} pass{'es' if chunks > 1 else ''} of ≤ {s.chunk:,} "
        f"(each reads the weights once; attention is the causal triangle on full layers, a band on windowed ones, "
        f"linear on recurrent ones):"
    )
    out += part_lines(s.prefill, prefill=True) + all_reduce_lines(s.prefill) + pipeline_lines(s.prefill)
    out.append(
        f"- overhead: {overhead_text(s.prefill)}; prefill: {_s(s.prefill.seconds)} ({s.prefill.bound}-bound); "
        f"{s.context:,} tokens ÷ {_s(s.prefill.seconds)} = {s.prefill_tok_s:,.1f} tok/s; time to first token: the "
        f"prefill, {_s(s.ttft_s)} (the first token is sampled from the prompt's last logits)"
    )
    out.append(f"{HOW_FAR_OFF}: decode {error_label(s.decode_error)}; prefill {error_label(s.prefill_error)}.")
    out.append("**Efficiencies used** (core/speed/fitted.json for fitted groups, else core/speed/efficiencies.json):")
    seen = set()
    for p in s.decode.parts + s.prefill.parts:
        e = p.efficiency
        if (e.engine, e.device) in seen:
            continue
        seen.add((e.engine, e.device))
        out.append(
            f"- {e.engine} on {e.device} — {e.status}: bandwidth × {e.bandwidth:.3f}; decode matmul "
            f"{e.decode_compute:.3g}{decode_basis(vars(e))}, attention {e.decode_attention:.3g}; prefill matmul "
            f"{e.prefill_compute:.3g}, "
            f"attention {e.prefill_attention:.3g} ({e.compute_unit}); overhead {overhead_rates(vars(e))}"
            + fill_text(e)
            + (
                f"; a CUDA prompt's MMQ tiles move {e.tile_traffic:.3g} × their weights and activations without reuse"
                if e.tile_traffic
                else ""
            )
            + (
                f"; weights converted to FP16 for cuBLAS move at {e.dequant_bandwidth:.3g} × the bandwidth"
                if e.dequant_bandwidth != 1
                else ""
            )
            + f". {e.provenance}"
            + (f" Fitted on {e.fitted_on}; checked on {e.checked_on}." if e.fitted_on else "")
        )
    return out
