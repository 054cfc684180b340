"""`python -m core speed`: per context and batch, the figures of core.speed as a table or JSON (the field names
decode_tok_s, aggregate_tok_s, prefill_tok_s, ttft_s, bytes_per_step and bound are a contract)."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, replace

from core.argtypes import MAX_RAM_GB_S, add_json_flag, positive_int
from core.engines.llamacpp import LlamaCppEngine
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError
from core.fit import Setup, Solver, flag_notes, setup_format
from core.report import format_note
from core.speed import calibration
from core.speed.efficiency import decode_basis, overhead_rates
from core.speed.groups import BACKENDS, ErrorBar, checked_backend
from core.speed.predict import (
    Hardware,
    Speed,
    backend_of,
    flash_attn,
    placement,
    predict,
    prefill_chunk,
    setup_weights,
)
from core.speed.ram import ISA_NAMES, host_isa, ram_bandwidth
from core.units import format_bytes, format_tokens, plural

DEFAULT_CONTEXTS = (4096, 32768)


def hardware(
    ram_gbs: float | None, threads: int | None, cpu_only: bool, cap_threads: bool = False
) -> tuple[Hardware, str]:
    """The host: RAM bandwidth as given or measured here (cached), threads as given or every core; this CPU's vector
    ISA when the figure is this machine's (a given bandwidth may describe another: its ISA is not known).
    `cap_threads` (the command line's --threads): refuse more threads than the measured figure's cores."""
    threads = threads or os.cpu_count() or 1
    if ram_gbs is not None:
        if not 0 < ram_gbs <= MAX_RAM_GB_S:  # NaN fails too
            raise InputError(f"--ram-gbs must be positive and at most {MAX_RAM_GB_S:,} GB/s, got {ram_gbs}")
        return Hardware(ram_gb_s=ram_gbs, threads=threads, cpu_only=cpu_only), "given (--ram-gbs)"
    ram = ram_bandwidth()
    if cap_threads and threads > ram.cores:  # this host's RAM figure, another machine's thread count
        raise InputError(
            f"--threads {threads} is more than this host's {ram.cores} cores, whose RAM figure would be used: for "
            "another machine give its --ram-gbs too"
        )
    hw = Hardware(ram.gb_s, threads, cpu_only, isa=host_isa(), ram_thread_gb_s=ram.thread_gb_s)
    return hw, f"{ram.source}; one thread {ram.thread_gb_s:.1f} GB/s"


def calibrated_host(
    cal: calibration.Calibration, threads: int, cpu_only: bool = False, backend: str | None = None
) -> Hardware:
    """This machine as its stored calibration times it (python -m core calibrate), with its vector ISA."""
    return Hardware(cal.ram_gb_s, threads, cpu_only, backend, host_isa(), cal, cal.ram_thread_gb_s)


def add_speed_flags(p: argparse.ArgumentParser) -> None:
    """The run settings that change speed only (-fa and -ub change memory too: core.cli.add_engine_options)."""
    p.add_argument(
        "--backend", choices=BACKENDS, help="ggml backend the card runs (default: CUDA on NVIDIA, ROCm on AMD, "
        "Metal on Apple, SYCL on Intel); cpu = no GPU, like --device cpu",
    )  # fmt: skip


def error_record(e: ErrorBar | None) -> dict | None:
    if e is None:
        return None
    return {
        "label": e.label, "group": e.group, "held_out_rows": e.rows if e.basis == "held-out" else 0,
        "basis": e.basis, "rows": e.rows, "median_abs_error": e.median, "within_20": e.within,
        "typical_ratio": e.ratio, "calibrated": e.calibrated or None,
        "caveat": e.caveat or None,  # what of the figure the group's held-out runs do not cover
    }  # fmt: skip


def host_for(
    setup: Setup, threads: int | None, cpu_only: bool, backend: str | None = None, ram_gbs: float | None = None
) -> tuple[Hardware, str, calibration.Calibration | None]:
    """(the host a speed is timed on, what its RAM figure is, its calibration): RAM only where the setup uses it
    (or a figure is given), then this host's stored calibration unless a figure is given, else `hardware`'s."""
    hw = Hardware(ram_gb_s=0.0, threads=threads or os.cpu_count() or 1, cpu_only=cpu_only, backend=backend)
    if not needs_ram(setup, hw) and ram_gbs is None:
        return hw, "not used (every layer on the GPU)", None
    cal = calibration.load()
    if cal is not None and ram_gbs is None:
        hw, ram_source = calibrated_host(cal, hw.threads, cpu_only, backend), cal.label
    else:
        hw, ram_source = hardware(ram_gbs, threads, cpu_only, cap_threads=True)
        hw = replace(hw, backend=backend)
    return replace(hw, calibration=cal), ram_source, cal


def needs_ram(setup: Setup, hw: Hardware) -> bool:
    where = placement(setup, hw)
    return hw.cpu_only or bool(where.on_cpu) or not where.output or bool(where.cpu_experts)


def record_keys() -> tuple[str, ...]:
    """The fields of a row's record (`record`), which a row that does not fit carries as null."""
    return (
        "decode_tok_s", "aggregate_tok_s", "prefill_tok_s", "ttft_s", "bytes_per_step", "flops_per_step", "bound",
        "decode_step_s", "decode_memory_s", "decode_compute_s", "overhead_s", "prefill_bound", "prefill_chunk",
        "prefill_pipelined_s", "decode_error", "prefill_error",
    )  # fmt: skip


def record(s: Speed) -> dict:
    return {
        "context": s.context,
        "batch": s.batch,
        "decode_tok_s": round(s.decode_tok_s, 3),
        "aggregate_tok_s": round(s.aggregate_tok_s, 3),
        "prefill_tok_s": round(s.prefill_tok_s, 3),
        "ttft_s": round(s.ttft_s, 6),
        "bytes_per_step": round(s.bytes_per_step),
        "flops_per_step": round(s.decode.flops),
        "bound": s.bound,
        "decode_step_s": s.decode.seconds,
        "decode_memory_s": s.decode.memory_s,
        "decode_compute_s": s.decode.compute_s,
        "overhead_s": s.decode.overhead_s,
        "prefill_bound": s.prefill.bound,
        "prefill_chunk": s.chunk,
        # what llama.cpp's pipeline over its layer split takes off the prompt (core.speed.predict.Pipeline; 0 without)
        "prefill_pipelined_s": s.prefill.pipelined_s,
        "decode_error": error_record(s.decode_error),
        "prefill_error": error_record(s.prefill_error),
    }


def speed_report(setup: Setup, args: argparse.Namespace, cpu_only: bool) -> dict:
    solver = Solver(setup)
    contexts = args.context or [c for c in DEFAULT_CONTEXTS if c <= solver.limit] or [solver.limit]
    batches = args.batch or [1]
    backend = (
        None if cpu_only or args.backend is None
        else checked_backend(setup.card, args.backend, setup.engine.name)
    )  # fmt: skip
    hw, ram_source, cal = host_for(setup, args.threads, cpu_only, backend, args.ram_gbs)
    if hw.ram_gb_s:  # a host whose RAM the speed uses: its CPU's vector set
        if args.cpu_isa in ("avx512", "avx2") and not cpu_only and setup.card.vendor == "Apple":
            raise InputError(
                f"--cpu-isa {args.cpu_isa} is an x86 vector set; {setup.card.name}'s CPU is Arm: give --cpu-isa other"
            )
        if setup.card.vendor == "Apple" and not cpu_only and not args.cpu_isa:
            hw = replace(hw, isa="")  # an Arm CPU: not this host's x86 vector set (the pooled factors)
        if args.cpu_isa:  # another machine's, or this one's said outright
            hw = replace(hw, isa="" if args.cpu_isa == "other" else args.cpu_isa)
    if args.pcie_gbs:
        hw = replace(hw, pcie_gb_s=args.pcie_gbs)
    weights = setup_weights(setup)
    rows = []
    effs = {}
    for context in contexts:
        if context > solver.limit:
            raise InputError(f"context {format_tokens(context)} is above {setup.model.name}'s limit {solver.limit:,}")
        fits = solver.concurrency(context) if not cpu_only else None
        # llama-server's unified slots bound the requests on any device, memory or not; vLLM's scheduler runs at
        # most --max-num-seqs (vllm serve's for the card) whatever the cache holds
        slots = solver.engine.slots(1) if isinstance(solver.engine, LlamaCppEngine) else 0
        seqs = solver.engine.max_seqs() if isinstance(solver.engine, VllmEngine) else 0
        for batch in batches:
            row = {"context": context, "batch": batch, "max_concurrency": fits, "fits": fits is None or fits >= batch}
            row["why"] = None  # why there is no speed, where there is none
            if slots > 1 and batch > slots:
                row |= {"fits": False, "why": f"{slots} slots: llama-server -np {batch} runs {batch}"}
            elif seqs and batch > seqs:
                row |= {"fits": False, "why": f"vLLM runs at most {seqs:,} at once here (vllm serve's --max-num-seqs)"}
            elif not row["fits"]:
                row["why"] = f"does not fit: {'none' if not fits or fits < 1 else f'{int(fits):,}'} fit at this context"
            if not row["fits"]:  # no speed for a setup that cannot run (the app's "— (does not fit)")
                rows.append(dict.fromkeys(record_keys(), None) | row)
                continue
            s = predict(setup, hw, context, batch, weights=weights)
            for part in s.decode.parts:
                effs[part.device] = asdict(part.efficiency)
            rows.append(record(s) | row)
    on_gpu = len(placement(setup, hw).layers)
    # a unified-memory machine runs its layers in RAM on its own CPU, from the same memory: this host's figures are
    # not that machine's unless given
    foreign = not cpu_only and setup.card.unified_memory and needs_ram(setup, hw) and args.ram_gbs is None
    host_note = (
        f"the layers in RAM are timed with this host's CPU and RAM ({ram_source}); on {setup.card.name} they run on "
        "its own CPU from its unified memory: give --ram-gbs, --threads and --cpu-isa for that machine"
        if foreign
        else ""
    )
    return {
        "model": setup.model.name,
        "engine": setup.engine.name,
        "device": "cpu" if cpu_only else setup.card.name,
        "card_bandwidth_gb_s": None if cpu_only else setup.card.bandwidth_gb_s,
        "card_bf16_tflops": None if cpu_only else setup.card.bf16_tflops,
        "card_dense_tflops": None if cpu_only else setup.card.dense_tflops,  # the peak it is timed by
        "card_fp32_tflops": None if cpu_only else setup.card.fp32_tflops,  # the vector peak, where listed
        "ram_gb_s": hw.ram_gb_s if needs_ram(setup, hw) else None,
        "ram_stream_gb_s": hw.ram_stream_gb_s if needs_ram(setup, hw) else None,  # at `threads` threads
        "ram_source": ram_source,
        "host_note": host_note,
        "notes": [n for n in (format_note(setup), *flag_notes(setup)) if n],
        "pcie_gb_s": hw.pcie_gb_s,  # the op offload's copies of layers in RAM, where a pass makes them
        "threads": hw.threads,
        "cpu_isa": hw.isa or None,  # the kernel factors' ISA; None: not known, the pooled factors
        "gpus": 0 if cpu_only else setup.gpus,
        "tp": setup.tp,
        "pp": setup.pp,
        "layers_on_gpu": on_gpu,
        "layers": len(setup.model.layers),
        "weights": setup_format(setup),  # as fit names it: the checkpoint's where none was asked
        "kv_dtype": setup.engine.kv_dtype(setup.model, setup.kv_dtype).name,
        "backend": backend_of(setup, hw),
        "flash_attn": flash_attn(setup),
        "n_ubatch": prefill_chunk(setup, 1 << 30) if isinstance(setup.engine, LlamaCppEngine) else None,
        "calibration": cal.record() if cal is not None else None,
        "efficiencies": effs,
        "rows": rows,
    }


def print_speed(out: dict) -> None:
    several = out["gpus"] > 1
    count = f"{out['gpus']}× " if several else ""
    where = "CPU only" if out["device"] == "cpu" else count + out["device"]
    # llama.cpp's -fa; the other engines' own fused attention kernels (vLLM's CPU backend has no FlashAttention)
    fa = (
        "fused attention" if out["engine"] != "llama.cpp" else f"flash attention {'on' if out['flash_attn'] else 'off'}"
    )
    print(
        f"{out['model']} on {where}, {out['engine']} ({out['backend']}, {fa}), weights {out['weights']}, "
        f"KV {out['kv_dtype']}, "
        f"{out['layers_on_gpu']} of {out['layers']} layers on the GPU{'s' if several else ''}"
    )
    if out["ram_gb_s"]:
        isa = f", {ISA_NAMES[out['cpu_isa']]} CPU" if out.get("cpu_isa") else ""
        reach = f" (reaching {out['ram_stream_gb_s']:.1f} GB/s)" if out["ram_stream_gb_s"] < out["ram_gb_s"] else ""
        threads = plural(out["threads"], "thread")
        print(f"system RAM {out['ram_gb_s']:.1f} GB/s ({out['ram_source']}), {threads}{reach}{isa}")
        if out["host_note"]:
            print(f"note: {out['host_note']}")
    for note in out["notes"]:
        print(f"note: {note}")
    for device, e in out["efficiencies"].items():
        print(
            f"{device} efficiencies ({e['status']}): bandwidth ×{e['bandwidth']:.3g}"
            + (f" (routed experts × {e['expert_bandwidth']:.3g} of it)" if e.get("expert_bandwidth", 1) != 1 else "")
            + ", "
            f"decode {e['decode_compute']:.3g}{decode_basis(e)} (attention {e['decode_attention']:.3g}), "
            f"prefill {e['prefill_compute']:.3g} (attention {e['prefill_attention']:.3g}) "
            f"({'GFLOP/s per thread' if device == 'cpu' else '× dense peak'}), overhead {overhead_rates(e, '/')}"
            + (f", MMQ tile traffic ×{e['tile_traffic']:.3g}" if e.get("tile_traffic") else "")
            + (f", FP16 conversion ×{e['dequant_bandwidth']:.3g}" if e.get("dequant_bandwidth", 1) != 1 else "")
        )
    head = f"{'context':>8} {'batch':>5} {'decode tok/s':>12} {'aggregate':>10} {'prefill tok/s':>13} "
    print(head + f"{'TTFT s':>9} {'bytes/step':>11} {'bound':>8}")
    for r in out["rows"]:
        if not r["fits"]:
            print(f"{format_tokens(r['context']):>8} {r['batch']:>5} — ({r['why']})")
            continue
        print(
            f"{format_tokens(r['context']):>8} {r['batch']:>5} {r['decode_tok_s']:>12.1f} "
            f"{r['aggregate_tok_s']:>10.1f} {r['prefill_tok_s']:>13.0f} {r['ttft_s']:>9.3g} "
            f"{format_bytes(r['bytes_per_step']):>11} "
            f"{r['bound']:>8}"
        )
    for kind in ("decode", "prefill"):
        # one line per distinct bar: a decode of many sequences may take a kernel path with its own (groups.PATHS)
        batches: dict[str, list[int]] = {}
        for r in out["rows"]:
            if r["fits"]:
                batches.setdefault(r[kind + "_error"]["label"], []).append(r["batch"])
        for label, at in batches.items():
            where = f" (batch {', '.join(map(str, sorted(set(at))))})" if len(batches) > 1 else ""
            print(f"{kind} error bar{where}: {label}")


def add_calibrate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="measure this host's RAM bandwidth and CPU matmul rate per weight format")
    p.add_argument("--threads", type=positive_int, help="threads to time with (default: every core)")
    p.add_argument(
        "--with", dest="kernel", choices=("auto", "llama.cpp", "numpy"), default="auto",
        help="whose kernels to time (auto: llama.cpp when the engines' venv has it, else numpy)",
    )  # fmt: skip
    add_json_flag(p)
    p.set_defaults(run=cmd_calibrate, show=print_calibration)


def cmd_calibrate(args: argparse.Namespace) -> dict:
    from core.speed.calibrate import calibrate  # numpy and subprocesses only for this command

    load = os.getloadavg()[0]
    cal = calibrate(args.threads, args.kernel)
    busy = load >= (os.cpu_count() or 1)
    warning = f"load average {load:.1f} on {os.cpu_count()} cores: other work slowed these timings" if busy else ""
    return cal.record() | {"stored": str(calibration.store(cal)), "load_average": load, "warning": warning or None}


def print_calibration(out: dict) -> None:
    one = f" ({out['ram_thread_gb_s']:.1f} with one thread)" if out.get("ram_thread_gb_s") else ""
    by = f" by kvscope {out['kvscope']}" if out.get("kvscope") else ""
    print(f"{out['host']}: RAM copy {out['ram_gb_s']:.1f} GB/s{one}, {out['method']}, at {out['time']}{by}")
    print(f"{'format':>8} {'decode GFLOP/s/thread':>22} {'prefill GFLOP/s/thread':>23}")
    for name, dec, pre in out["rates"]:
        print(f"{name:>8} {'-' if dec is None else f'{dec:.1f}':>22} {'-' if pre is None else f'{pre:.1f}':>23}")
    for head, dec, pre, stream in out["attention"]:  # f16 cache, a 2,048-token prompt beside a 256-token one
        name = f"attn d={head}"
        cache = "" if stream is None else f"   decode cache {stream:.2f} GB/s/thread"
        dec_s, pre_s = ("-" if r is None else f"{r:.1f}" for r in (dec, pre))
        print(f"{name:>10} {dec_s:>20} {pre_s:>23}{cache}")
    print(f"stored in {out['stored']}; every CPU speed figure on this host now uses it")
    if out["warning"]:
        print(f"warning: {out['warning']}; calibrate again when the machine is idle")
