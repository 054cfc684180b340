"""Full-size probe on a GPU machine: Qwen/Qwen3-8B and Qwen/Qwen3.5-9B, random weights, 4K / 16K / 32K.

    python tests/gpu/run_gpu_probe.py [--bandwidth-gb-s 4800] [--contexts 4k 16k 32k] [--timeout 280]

Prints predicted vs measured cache bytes, peak allocated memory, decode tok/s, the decode mode that ran, and the
bandwidth roofline (GPU bandwidth ÷ (weight bytes + cache bytes), the bytes one decode step must read). Needs only
this repository (configs are bundled presets) and no network; flash-linear-attention is optional (without it
transformers runs Gated DeltaNet in its torch fallback, and the output says so). Budget: under 10 minutes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network: presets hold the configs

from core.errors import InputError  # noqa: E402
from core.probe import ProbeRequest, run_probe  # noqa: E402
from core.units import format_bytes, format_tokens, parse_tokens  # noqa: E402

MODELS = ("Qwen/Qwen3-8B", "Qwen/Qwen3.5-9B")
DEFAULT_BANDWIDTH_GB_S = 4800.0  # H200 SXM, vendor peak (reference/gpus.csv)


def bandwidth_for(gpu: str | None, flag: float | None) -> tuple[float, str]:
    if flag:
        return flag, "--bandwidth-gb-s"
    try:
        from core.memory.gpus import card_named

        card = card_named(gpu or "")
        if card.bandwidth_gb_s:
            return card.bandwidth_gb_s, f"core.memory.gpus: {card.name}"
    except (ImportError, InputError, AttributeError):
        pass
    return DEFAULT_BANDWIDTH_GB_S, "default (H200)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bandwidth-gb-s", type=float, default=None)
    parser.add_argument("--contexts", nargs="+", default=["4k", "16k", "32k"])
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--decode-steps", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=280.0, help="per model, seconds")
    parser.add_argument("--no-compile", action="store_true", help="eager decode (to see the Python-loop trap)")
    parser.add_argument("--results-dir", default=None, help="default: measurements/results")
    args = parser.parse_args()
    contexts = tuple(parse_tokens(c) for c in args.contexts)
    failures = 0
    t0 = time.monotonic()
    for model in args.models:
        request = ProbeRequest(
            model=model,
            contexts=contexts,
            device="cuda",
            weights="random",
            scale_layers=None,
            decode_steps=args.decode_steps,
            compile=not args.no_compile,
        )
        print(f"== {model}", flush=True)
        result = run_probe(
            request,
            on_progress=lambda m: print(f"   {m['message']}", flush=True) if m.get("event") == "progress" else None,
            timeout=args.timeout,
            directory=args.results_dir,
        )
        if not result.ok:
            failures += 1
            print(f"   {result.status}: {result.error}\n{result.log_tail}", flush=True)
            if not result.contexts:
                continue
        bw, bw_source = bandwidth_for(result.env.get("gpu"), args.bandwidth_gb_s)
        weights = result.weights_bytes or 0
        print(f"   {result.device}; {result.weights}; {result.scale}")
        print(f"   weights {format_bytes(weights)}; bandwidth {bw:,.0f} GB/s ({bw_source})")
        print(f"   decode mode {result.decode_mode}")
        print(
            f"   {'context':>7} {'predicted':>11} {'measured':>11} {'ratio':>6} {'peak':>11} "
            f"{'prefill t/s':>11} {'decode t/s':>10} {'roofline t/s':>12} {'% roof':>6} {'mode':>14}"
        )
        for c in result.contexts:
            cache = c.measured_cache_bytes or c.predicted_cache_bytes or 0
            roof = bw * 1e9 / (weights + cache) if weights else None
            share = f"{100 * c.decode_tok_s / roof:.0f}%" if roof and c.decode_tok_s else "—"
            print(
                f"   {format_tokens(c.context):>7} {format_bytes(c.predicted_cache_bytes or 0):>11} "
                f"{format_bytes(c.measured_cache_bytes or 0):>11} {c.ratio or 0:>6.3f} "
                f"{format_bytes(c.peak_bytes) if c.peak_bytes else '—':>11} {c.prefill_tok_s or 0:>11,.0f} "
                f"{c.decode_tok_s or 0:>10,.1f} {roof or 0:>12,.1f} {share:>6} {c.decode_mode:>14}"
            )
        for note in result.notes:
            print(f"   note: {note}")
        print(f"   env: {result.env}", flush=True)
    print(f"total {time.monotonic() - t0:.0f} s; results in {args.results_dir or 'measurements/results'}/probes.jsonl")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
