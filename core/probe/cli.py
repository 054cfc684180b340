"""`python -m core probe MODEL ...`: the live probe without the app. core/cli.py wires it in with add_probe_parser."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from core.argtypes import add_json_flag, byte_count, finite_float, positive_int, seconds, tokens
from core.errors import InputError
from core.model.loading import load_model
from core.probe.request import BACKENDS, CPU_KV_REQUESTS, DEVICES, ProbeRequest, vllm_args_text
from core.probe.runner import run_probe
from core.units import format_bytes, format_tokens

DEFAULT_CONTEXT = 4096


def _progress(msg: dict[str, Any]) -> None:
    if msg.get("event") in ("progress", "timeout", "cancelled", "error"):
        print(f"probe: {msg.get('message')}", file=sys.stderr, flush=True)


def cmd_probe(args: argparse.Namespace) -> dict[str, Any]:
    request = ProbeRequest(
        model=args.model,
        name=args.name,
        contexts=tuple(args.context or (DEFAULT_CONTEXT,)),
        backend=args.backend,
        device=args.device,
        decode_steps=args.decode_steps,
        scale_layers=args.scale_layers,
        weights=args.weights,
        dtype=args.dtype,
        kv_dtype=args.kv_dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        gpu_memory_utilization=args.gpu_memory_utilization,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        prefix_caching=args.prefix_caching,
        block_size=args.block_size,
    )
    if not Path(args.model).is_dir():  # a checkpoint folder is read by the probe itself
        request.check_limit(load_model(args.model).max_context)
    result = run_probe(request, on_progress=None if args.quiet else _progress, timeout=args.timeout)
    if not result.ok:
        tail = f"\n{result.log_tail}" if result.log_tail and result.status == "error" else ""
        raise InputError(f"probe {result.status}: {result.error}{tail}")
    return {
        "model": result.model,
        "backend": request.backend,
        "device": result.device,
        "dtype": result.dtype,
        "weights": result.weights,
        "scale": result.scale,
        "decode_mode": result.decode_mode,
        "status": result.status,
        "contexts": [
            {
                "context": c.context,
                "predicted_cache_bytes": c.predicted_cache_bytes,
                "measured_cache_bytes": c.measured_cache_bytes,
                "ratio": c.ratio,
                "peak_bytes": c.peak_bytes,
                "prefill_tok_s": c.prefill_tok_s,
                "decode_tok_s": c.decode_tok_s,
                "decode_mode": c.decode_mode,
                "kv_capacity_tokens": c.kv_capacity_tokens,
                "max_concurrency": c.max_concurrency,
                "predicted_kv_capacity_tokens": c.predicted_kv_capacity_tokens,
                "predicted_max_concurrency": c.predicted_max_concurrency,
                "predicted_prefill_tok_s": c.predicted_prefill_tok_s,
                "predicted_decode_tok_s": c.predicted_decode_tok_s,
                "speed_basis": c.speed_basis or None,
            }
            for c in result.contexts
        ],
        "vllm_args": result.vllm_args,
        "notes": list(result.notes),
        "results_file": result.results_path,
    }


def _b(n: int | None) -> str:
    return "—" if n is None else format_bytes(n)


def _n(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _r(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def print_probe(out: dict[str, Any]) -> None:
    print(f"{out['model']} on {out['device']} ({out['backend']}, {out['dtype']}), decode {out['decode_mode']}")
    print(f"{out['weights']}; {out['scale']}")
    timed = any(c["predicted_decode_tok_s"] is not None for c in out["contexts"])  # kvscope's speed for the run
    print(
        f"{'context':>8}  {'predicted':>11}  {'measured':>11}  {'ratio':>6}  {'peak':>11}  "
        f"{'prefill t/s':>11}  {'decode t/s':>10}" + (f"  {'predicted':>11}  {'predicted':>10}" if timed else "")
    )
    for c in out["contexts"]:
        ratio = "—" if c["ratio"] is None else f"{c['ratio']:.3f}"
        print(
            f"{format_tokens(c['context']):>8}  {_b(c['predicted_cache_bytes']):>11}  "
            f"{_b(c['measured_cache_bytes']):>11}  {ratio:>6}  {_b(c['peak_bytes']):>11}  "
            f"{_r(c['prefill_tok_s']):>11}  {_r(c['decode_tok_s']):>10}"
            + (f"  {_r(c['predicted_prefill_tok_s']):>11}  {_r(c['predicted_decode_tok_s']):>10}" if timed else "")
        )
        if c["kv_capacity_tokens"] is not None:
            ours = c["predicted_kv_capacity_tokens"]
            print(f"{'':>8}  vLLM's KV cache: {c['kv_capacity_tokens']:,} tokens (kvscope {_n(ours)})")
    if out["contexts"] and (basis := out["contexts"][0]["speed_basis"]):
        print(f"predicted speed: `python -m core speed` on {basis}" if timed else f"speed {basis}")
    if out["vllm_args"]:
        print(f"vLLM ran, and kvscope predicted, with: {vllm_args_text(out['vllm_args'])}")
    for note in out["notes"]:
        print(f"note: {note}")
    if out["results_file"]:
        print(f"recorded in {out['results_file']}")


def add_probe_parser(sub: Any) -> argparse.ArgumentParser:
    """Add `probe` to a `python -m core` subparsers object (core/cli.py's contract: run returns a dict)."""
    p = sub.add_parser("probe", help="measure a model's real cache, memory and speed here, beside the prediction")
    p.add_argument("model", help="Hugging Face repo id, bundled preset, config.json path or checkpoint folder")
    p.add_argument("--name", default="", help="what the results file calls the model (default: its preset/repo id)")
    p.add_argument("--backend", default="transformers", choices=BACKENDS, help="what runs it (default transformers)")
    p.add_argument("--device", default="auto", choices=DEVICES, help="auto: CUDA where torch sees a GPU, else CPU")
    p.add_argument("--context", type=tokens, action="append", help="tokens, e.g. 4096 or 32k (repeatable)")
    p.add_argument("--decode-steps", type=positive_int, default=32, help="decode steps timed per context (default 32)")
    p.add_argument(
        "--scale-layers",
        type=positive_int,
        default=None,
        help="probe a copy with about N layers (same kinds, widths and kind mix)",
    )
    p.add_argument("--timeout", type=seconds, default=600.0, help="seconds before the probe is killed")
    p.add_argument(
        "--weights",
        default="auto",
        choices=("auto", "random"),
        help="auto: real weights if already on disk (never downloaded), else random",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=("auto", "bf16", "fp16", "fp32"),
        help="compute dtype, also transformers' KV dtype (default auto: the config's)",
    )
    p.add_argument("--kv-dtype", default="auto", help="vLLM kv_cache_dtype (auto, fp8, ...)")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=1, help="vLLM: GPUs to shard over (default 1)")
    # vLLM's options, as `fit --engine vllm` takes them: the probe starts vLLM and predicts with the same ones
    p.add_argument("--gpu-memory-utilization", type=finite_float, default=0.92, help="vLLM (default 0.92)")
    p.add_argument(
        "--kv-cache-memory-bytes",
        type=byte_count,
        help=f"vLLM: KV pool in bytes (default: gpu memory utilization on CUDA; {CPU_KV_REQUESTS} requests at "
        "max_model_len on its CPU backend)",
    )
    p.add_argument("--max-num-batched-tokens", type=positive_int, help="vLLM (default 2048)")
    p.add_argument("--max-num-seqs", type=positive_int, help="vLLM (default 256)")
    p.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=True, help="vLLM (default on)")
    p.add_argument("--block-size", type=positive_int, help="vLLM (default its own: 16 on CUDA, 128 on CPU)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_json_flag(p)
    p.set_defaults(run=cmd_probe, show=print_probe)
    return p
