"""`python -m core`: the command-line face of the sizing core. Flags named in issues are a contract."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import NoReturn

from core.argtypes import (
    add_json_flag,
    byte_count,
    byte_size,
    finite_float,
    float_range,
    format_name,
    gb_per_s,
    gpu_gib,
    int32,
    positive_int,
    thread_count,
    tokens,
)
from core.check import add_check_parser
from core.cluster_report import cluster_report, parse_layout, print_cluster
from core.engines import ENGINES, Engine, configured
from core.engines.base import CacheAccount
from core.engines.llamacpp import DEFAULT_FRONTEND, FRONTENDS, LlamaCppBuild, LlamaCppEngine, windows_dropped
from core.engines.runtimes import OLLAMA_KV_TYPES, OllamaSettings, request_ctx
from core.engines.vllm_cluster import Cluster
from core.engines.vllm_engine import VERSIONS, VllmEngine, VllmOptions
from core.errors import InputError
from core.files import read_regular_file
from core.finders import COST_BASIS, DEFAULT_CONTEXT, card_record, model_record, rank_cards, rank_models
from core.fit import Setup, cache_in_ram, default_split, fit
from core.llamacpp_autofit import autofit_record, autofit_sentence, fit_params, print_autofit
from core.memory.gguf_hub import gguf_name
from core.memory.gpus import MAX_GB_S, MAX_TFLOPS, Card, card_named, cards, with_figures
from core.memory.quant import format_named, gguf_type
from core.memory.weightfiles import read_weights
from core.model.config import MAX_CONFIG_BYTES, parse_json, resolve
from core.model.loading import load_model, presets
from core.ollama_report import DEFAULT_CARDS, MEASURED, free_card, host, parse_free, print_report, report
from core.probe import add_probe_parser
from core.report import format_note, table_records
from core.speed.cli import add_calibrate_parser, add_speed_flags, print_speed, speed_report
from core.speed.work import engine_view
from core.units import MIB, floor_places, format_bytes, format_tokens

DEFAULT_CONTEXTS = (4096, 32768, 131072)


GPUS_HELP = "GPUs of that card (default 1): vLLM shards heads over them, llama.cpp and transformers split layers"


def _contexts(values: list[int] | None, model_max: int | None) -> list[int]:
    if values:
        return values
    return [c for c in DEFAULT_CONTEXTS if model_max is None or c <= model_max] or [model_max or 4096]


def served_notes(engine: VllmEngine, model, context: int, here: int, args: argparse.Namespace) -> list[str]:
    """`size` has no card, so no `vllm serve` defaults for one (VllmEngine.served_on): where the card's batched
    tokens or Hopper's FlashInfer GatedDeltaNet would change this cache (`here` bytes at `context`), say so (fit on
    the card uses them)."""
    notes = []
    if args.max_num_batched_tokens is None:
        batched = engine.batched_tokens()
        other = engine.with_options(max_num_batched_tokens=8192).account(model, context, args.batch, args.kv_dtype)
        if other.total != here:
            notes.append(
                f"vLLM: sized at --max-num-batched-tokens {batched:,} (no card given); `vllm serve` takes more on "
                "large cards (8,192 on an H100), which changes this cache: give --max-num-batched-tokens, or use "
                "fit with the card"
            )
    flashinfer = engine.with_options(gdn_flashinfer=True).account(model, context, args.batch, args.kv_dtype)
    if not engine.options.gdn_flashinfer and flashinfer.total != here:
        notes.append(
            "vLLM: sized with the Triton GatedDeltaNet kernels' state; on Hopper vLLM runs FlashInfer's, whose state "
            f"differs ({format_bytes(flashinfer.total)} at {format_tokens(context)}): fit with a Hopper card sizes it"
        )
    return notes


def checked_kv_dtype(engine: Engine, kv_dtype: str) -> str:
    """--kv-dtype, refused up front unless the engine knows it: the commands that try many cards or plans would
    otherwise refuse every one of them and still exit 0."""
    if kv_dtype.strip().lower() not in engine.kv_dtypes:
        raise InputError(
            f"--kv-dtype: KV dtype {kv_dtype[:40]!r} is not available on {engine.name}; choose one of: "
            + ", ".join(engine.kv_dtypes)
        )
    return kv_dtype


def cmd_size(args: argparse.Namespace) -> dict:
    model = load_model(args.model)
    engine = build_engine(args)
    checked_kv_dtype(engine, args.kv_dtype)
    contexts = _contexts(args.context, model.max_context)
    accounts = [engine.account(model, n, args.batch, args.kv_dtype) for n in contexts]
    storage = engine.storage(model, args.kv_dtype)
    raw = engine.fixed_bytes_per_sequence(model, args.kv_dtype)
    notes = list(model.notes)
    if isinstance(engine, VllmEngine) and raw:
        notes.append(vllm_state_note(engine, accounts[0], raw))
    if isinstance(engine, VllmEngine):
        notes += served_notes(engine, model, contexts[0], accounts[0].total, args)
    if isinstance(engine, LlamaCppEngine) and (dropped := windows_dropped(model)):
        notes.append(dropped)
    if isinstance(engine, LlamaCppEngine) and engine.fixed_slots():
        notes.append(engine.slots_note(model, counts=False))
        if args.batch > engine.slots(1):
            notes.append(
                f"--batch {args.batch} is more than llama-server's {engine.slots(1)} automatic slots: sized as "
                f"-np {args.batch} --kv-unified ({args.batch} slots of one unified cache)"
            )
    return {
        "model": model.name,
        "model_type": model.model_type,
        "engine": engine.name,
        "engine_options": engine_options(engine),
        "engine_rules": engine.rules_version,
        "kv_dtype": accounts[0].kv_dtype,
        "state_dtypes": {"conv": storage.conv.name, "ssm": storage.ssm.name, "linear": storage.linear.name},
        "batch": args.batch,
        "kv_bytes_per_token": engine.kv_bytes_per_token(model, args.kv_dtype),
        "fixed_bytes_per_sequence": raw,
        # as the engine builds them: llama.cpp's windows, vLLM's hybrid layers one layer a cache
        "layers": engine.layer_counts(model)
        if isinstance(engine, VllmEngine)
        else engine_view(model, engine).layer_counts(),
        "max_context": model.max_context,
        "notes": notes,
        "kinds": [
            {
                "kind": line.label,
                "layers": line.count,
                "bytes_per_token": line.bytes_per_token,
                "fixed_bytes": line.fixed_bytes,
            }
            for line in accounts[0].lines
        ],
        "contexts": [
            {
                "context": a.context,
                "cache_bytes": a.total,
                "token_bytes": a.token_bytes,
                "fixed_bytes": a.fixed_bytes,
            }
            for a in accounts
        ],
    }


def vllm_state_note(engine: VllmEngine, account: CacheAccount, raw: int) -> str:
    """Why vLLM's fixed column is not the state the layers hold: each state layer takes a whole page of the pool
    (the attention page's size where the two share it), and a request holds more than one state block with prefix
    caching (VllmEngine.blocks_for)."""
    states = [line for line in account.lines if line.fixed_bytes and not line.bytes_per_token]
    pages = sum(line.count * line.fixed_bytes for line in states)
    blocks = account.fixed_bytes // (pages * account.batch) if pages else 0
    caching = engine.options.prefix_caching
    return (
        f"vLLM: the layers hold {raw:,} B of state per sequence; its pool gives each state layer a page of "
        + ", ".join(f"{line.fixed_bytes:,} B ({line.label})" for line in states)
        + f", {blocks} per request{' with prefix caching' if caching else ''}: the fixed column is {blocks} × "
        f"{pages:,} B a request" + ("; --no-prefix-caching holds fewer" if caching and blocks > 1 else "")
    )


def print_size(out: dict) -> None:
    print(f"{out['model']} ({out['model_type']}) on {out['engine']}, KV {out['kv_dtype']}, batch {out['batch']}")
    print(f"rules: {out['engine_rules']}")
    print("layers: " + ", ".join(f"{n}× {k}" for k, n in out["layers"].items()))
    print(f"KV per token: {out['kv_bytes_per_token']:,} B ({format_bytes(out['kv_bytes_per_token'])})")
    fixed = out["fixed_bytes_per_sequence"]
    print(f"fixed state per sequence: {fixed:,} B ({format_bytes(fixed)})")
    for note in out["notes"]:
        print(f"note: {note}")
    print(f"{'context':>10}  {'cache':>12}  {'growing':>12}  {'fixed':>12}")
    for row in out["contexts"]:
        print(
            f"{format_tokens(row['context']):>10}  {format_bytes(row['cache_bytes']):>12}  "
            f"{format_bytes(row['token_bytes']):>12}  {format_bytes(row['fixed_bytes']):>12}"
        )


# each engine's own flags (argparse dest: the flag as typed); given with another --engine, they are refused
ENGINE_FLAGS = {
    "vllm": {
        "platform": "--platform",
        "vllm_version": "--vllm-version",
        "max_num_batched_tokens": "--max-num-batched-tokens",
        "max_num_seqs": "--max-num-seqs",
        "prefix_caching": "--[no-]prefix-caching",
        "kv_cache_memory_bytes": "--kv-cache-memory-bytes",
        "max_model_len": "--max-model-len",
        "gpu_memory_utilization": "--gpu-memory-utilization",
    },
    "llama.cpp": {
        "frontend": "--frontend",
        "swa_full": "--[no-]swa-full",
        "kv_unified": "--[no-]kv-unified",
        "flash_attn": "--flash-attn",
        "ubatch": "--ubatch",
        "batch_size": "--batch-size",
        "llamacpp_build": "--llamacpp-build",
        "n_gpu_layers": "--n-gpu-layers",
        "n_cpu_moe": "--n-cpu-moe",
        "cpu_moe": "--cpu-moe",
        "pcie_gbs": "--pcie-gbs",
    },
}


UNSET = {"n_cpu_moe": 0, "cpu_moe": False}  # flags whose default is a value, not None


def foreign_flags(args: argparse.Namespace) -> None:
    """Refuse another engine's flags: `--frontend llama-server` without `--engine llama.cpp` sized transformers."""
    for engine, flags in ENGINE_FLAGS.items():
        given = [flag for dest, flag in flags.items() if getattr(args, dest, None) not in (None, UNSET.get(dest))]
        if given and engine != args.engine:
            raise InputError(
                f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} {engine}'s; add --engine {engine} "
                f"(this is {args.engine})"
            )


def build_engine(args: argparse.Namespace) -> Engine:
    """The engine with the options given on the command line; each flag belongs to its own engine (vLLM and
    transformers have no -fa or -ub: they run fused attention and their own chunking), and another's is refused."""
    foreign_flags(args)
    engine = configured(
        args.engine,
        frontend=args.frontend,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_num_seqs=args.max_num_seqs,
        prefix_caching=args.prefix_caching,
        platform=args.platform,
        version=args.vllm_version,
        swa_full=args.swa_full,
        kv_unified=args.kv_unified,
        build=args.llamacpp_build,
    )
    return with_run_flags(engine, args)


def with_run_flags(engine: Engine, args: argparse.Namespace) -> Engine:
    """-fa, -ub and -b (add_run_flags) on a llama.cpp engine; other engines have none of these knobs."""
    if not isinstance(engine, LlamaCppEngine):
        return engine
    if args.flash_attn is not None:
        engine = engine.with_options(flash_attn=args.flash_attn == "on")
    if args.ubatch is None and args.batch_size is None:
        return engine
    return engine.with_ubatch(args.ubatch, args.batch_size)


def add_run_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """llama.cpp's -fa, -ub and -b: they size its compute buffers (and set its prompt speed)."""
    p.add_argument(
        "--flash-attn", "-fa", choices=("on", "off"), help="llama.cpp: flash attention (default on/auto; off stores V "
        "transposed and refuses a quantised V)",
    )  # fmt: skip
    p.add_argument("--ubatch", "-ub", type=tokens, help="llama.cpp: n_ubatch, prompt tokens per pass (512; 2k = 2048)")
    p.add_argument(
        "--batch-size", "-b", type=tokens,
        help="llama.cpp: n_batch (the front end's: 2048 for llama-server and llama-cli); a pass runs min(-b, -ub)",
    )  # fmt: skip


def engine_options(engine: Engine) -> dict:
    options = getattr(engine, "options", None)
    return asdict(options) if options is not None else {}


gpu_gb_s = float_range(0, MAX_GB_S, " GB/s")
gpu_tflops = float_range(0, MAX_TFLOPS, " TFLOPS")


def add_card_figures(p: argparse.ArgumentParser, whose: str, named: bool = True) -> None:
    """--gpu-gbs and --gpu-tflops: a card's speed figures, for a --gpu-mem-gib card or over a --gpu card's own
    (`named`: the command takes --gpu)."""
    instead = " (with --gpu: instead of the card's)" if named else ""
    p.add_argument("--gpu-gbs", type=gpu_gb_s, help=f"memory bandwidth of {whose} in GB/s{instead}")
    p.add_argument(
        "--gpu-tflops",
        type=gpu_tflops,
        help=f"dense 16-bit (BF16, else FP16) tensor TFLOPS of {whose}, no sparsity"
        + (" (with --gpu: instead of the card's; its FP8 peak stays)" if named else ""),
    )


def add_card_options(p: argparse.ArgumentParser, gpu_help: str, split: bool) -> None:
    """--gpu or --gpu-mem-gib (with --gpu-gbs and --gpu-tflops to time it), and with `split` how many GPUs and how
    the model is split over them."""
    p.add_argument("--gpu", help=gpu_help)
    p.add_argument("--gpu-mem-gib", type=gpu_gib, help="memory of one GPU in GiB, instead of --gpu")
    add_card_figures(p, "one GPU")
    if split:
        p.add_argument(
            "--gpus",
            type=positive_int,
            default=1,
            help=GPUS_HELP,
        )
        p.add_argument("--tp", type=positive_int, help="tensor parallel size (vLLM)")
        p.add_argument("--pp", type=positive_int, help="pipeline parallel size / layer split")


def add_kv_dtype_flag(p: argparse.ArgumentParser) -> None:
    kinds = "; ".join(f"{name}: {', '.join(configured(name).kv_dtypes[1:])}" for name in sorted(ENGINES))
    p.add_argument("--kv-dtype", default="auto", help=f"KV cache dtype (default auto: the engine's own; {kinds})")


def add_engine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        default="transformers",
        choices=sorted(ENGINES),
        help="the engine whose cache layout, defaults and overheads apply (default transformers)",
    )
    vllm = p.add_argument_group("vLLM")
    vllm.add_argument("--platform", choices=("cuda", "cpu"), help="vLLM backend (default cuda)")
    vllm.add_argument(
        "--vllm-version",
        choices=VERSIONS,
        help=f"vLLM: whose 'KV cache size' log line to reproduce (default {VllmOptions.version})",
    )
    vllm.add_argument(
        "--max-num-batched-tokens",
        type=positive_int,
        help="vLLM (default: `vllm serve`'s for the card: 16384 from 160 GiB, 8192 from 70 GiB but A100, else 2048)",
    )
    vllm.add_argument(
        "--max-num-seqs",
        type=positive_int,
        help="vLLM: requests its scheduler runs at once; the sampler's profile run sizes its logits by it (default: "
        "`vllm serve`'s for the card: 1024 from 70 GiB but A100, else 256)",
    )
    vllm.add_argument(
        "--prefix-caching", action=argparse.BooleanOptionalAction, help="vLLM: state blocks per request (default on)"
    )
    llama = p.add_argument_group("llama.cpp")
    llama.add_argument(
        "--frontend",
        choices=sorted(FRONTENDS),
        help=f"llama.cpp: whose defaults apply (default {DEFAULT_FRONTEND}); the flags below override them",
    )
    llama.add_argument(
        "--swa-full", action=argparse.BooleanOptionalAction, default=None, help="llama.cpp: full-size SWA cache"
    )
    llama.add_argument(
        "--kv-unified",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="llama.cpp: one cell buffer shared by all sequences",
    )
    add_run_flags(llama)
    add_build_option(llama)


def llamacpp_build(text: str) -> LlamaCppBuild:
    try:
        return LlamaCppBuild.parse(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_build_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--llamacpp-build: whose -ngl convention and --fit rules (core.engines.llamacpp.LlamaCppBuild)."""
    p.add_argument(
        "--llamacpp-build",
        type=llamacpp_build,
        help="llama.cpp: the build whose -ngl and --fit rules apply, as bNNNN, NNNN or its release date YYYY-MM-DD "
        "(default: the bundled 0c1e57098's)",
    )


def figures_given(args: argparse.Namespace) -> bool:
    return args.gpu_gbs is not None or args.gpu_tflops is not None


def card_from(args: argparse.Namespace) -> Card:
    if args.gpu is None and args.gpu_mem_gib is None and figures_given(args):
        raise InputError(
            "--gpu-gbs / --gpu-tflops are a card's speed figures: give its memory too (--gpu-mem-gib 16), or name "
            "the card whose figures they replace (--gpu T4)"
        )
    if (args.gpu is None) == (args.gpu_mem_gib is None):
        raise InputError("give the card either by name (--gpu 'RTX 4090') or by memory (--gpu-mem-gib 24)")
    if args.gpu is not None:
        return with_figures(card_named(args.gpu), args.gpu_gbs, args.gpu_tflops)
    return Card.custom(args.gpu_mem_gib, args.gpu_gbs, args.gpu_tflops)


def add_cpu_moe_options(p: argparse.ArgumentParser) -> None:
    """llama.cpp's flags that keep routed experts in system RAM (common/arg.cpp)."""
    p.add_argument(
        "--n-cpu-moe", "-ncmoe", type=int32, default=0, help="llama.cpp: the first N layers' experts stay in RAM"
    )
    p.add_argument("--cpu-moe", "-cmoe", action="store_true", help="llama.cpp: every layer's experts stay in RAM")


def cpu_experts(args: argparse.Namespace) -> range:
    if args.n_cpu_moe < 0:
        raise InputError(f"--n-cpu-moe must be 0 or more, got {args.n_cpu_moe}")
    return range(1 << 30 if args.cpu_moe else args.n_cpu_moe)  # --cpu-moe: every layer


def build_setup(args: argparse.Namespace) -> Setup:
    card = card_from(args)
    engine = build_engine(args)
    checked_kv_dtype(engine, args.kv_dtype)
    gpus = args.gpus
    tp, pp = default_split(engine, gpus, args.tp, args.pp)
    return Setup(
        model=load_model(args.model),
        engine=engine,
        card=card,
        gpus=gpus,
        tp=tp,
        pp=pp,
        weights=args.weights,
        kv_dtype=args.kv_dtype,
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,
        max_model_len=args.max_model_len,
        gpu_layers=args.n_gpu_layers,
        cpu_experts=cpu_experts(args),
        weights_file=read_weights(weights) if (weights := args.weights_file or _gguf_model(args.model)) else None,
        **({} if args.gpu_memory_utilization is None else {"gpu_memory_utilization": args.gpu_memory_utilization}),
    )


def _gguf_model(model: str) -> str | None:
    """A model argument naming a Hub GGUF (org/repo:QUANT) brings its weights: the header's exact bytes."""
    return model if gguf_name(model) is not None else None


def cmd_fit(args: argparse.Namespace) -> dict:
    if args.engine == "vllm" and args.platform == "cpu" and args.gpu is not None:
        raise InputError(
            "--platform cpu is vLLM on the host's CPU: give the memory it may use with --gpu-mem-gib, not a GPU (--gpu)"
        )
    result = fit(build_setup(args), args.context)
    setup = result.setup
    warning = format_note(setup)
    # what llama-server / llama-cli would start with on their own (--fit, on by default), as the app says; only
    # where a row does not fit with every layer on the GPU, which is when it differs
    auto = None
    if isinstance(setup.engine, LlamaCppEngine) and args.frontend == "ollama":  # Ollama's own split, as the app says
        from core.ollama_report import ollama_sentence

        auto = ollama_sentence(setup, result.rows[0].context)[0]
    elif isinstance(setup.engine, LlamaCppEngine) and not all(r.fits for r in result.rows):
        auto = autofit_sentence(setup, args.frontend or DEFAULT_FRONTEND)
    out = {
        "model": setup.model.name,
        "engine": setup.engine.name,
        "engine_options": engine_options(result.engine or setup.engine),
        "engine_rules": setup.engine.rules_version,
        "card": setup.card.name,
        "card_memory_bytes": setup.card.memory_bytes,
        "gpus": setup.gpus,
        "tp": setup.tp,
        "pp": setup.pp,
        "weights": result.weights_format,
        "kv_dtype": result.rows[0].account.kv_dtype,
        "usable_bytes": result.usable_bytes,
        "weights_bytes": result.weights_bytes,
        "overhead_bytes": result.overhead_bytes,
        "kv_budget_bytes": result.kv_budget_bytes,
        "max_context": result.max_context,
        "context_limit": result.context_limit,
        "notes": [*([warning] if warning else []), *result.notes, *([auto] if auto else [])],
        "contexts": [
            r | ({"requests": "in RAM"} if cache_in_ram(result, row) else {})  # -ngl 0: the cache is in system RAM
            for r, row in zip(table_records(result), result.rows, strict=True)
        ],
    }
    if result.vllm is not None:
        out["vllm"] = {
            "max_model_len": result.context_limit,
            "num_blocks": result.vllm.num_blocks,
            "blocks_per_request": result.vllm.blocks_per_request,
            "max_concurrency": round(result.vllm.max_concurrency, 2),
            "kv_cache_tokens": result.vllm.kv_cache_tokens,
            "log": (
                f"{'CPU' if setup.engine.on_cpu else 'GPU'} KV cache size: {result.vllm.kv_cache_tokens:,} tokens, "
                f"Maximum concurrency for {result.context_limit:,} tokens per request: "
                f"{result.vllm.max_concurrency:.2f}x"
            ),
        }
    return out


def _count_note(r: dict) -> str:
    """After a request count: whether llama.cpp's slots bound it and the -c it needs, or vLLM's --max-num-seqs."""
    parts = (["every slot"] if "slots" in r else []) + ([f"-c {r['n_ctx']}"] if r.get("n_ctx") else [])
    if "max_num_seqs" in r:  # vLLM's scheduler, not the cache, bounds the requests at once
        parts.append(f"{r['max_num_seqs']:,} at once: --max-num-seqs")
    if "front_end_runs" in r:  # llama.cpp's front end runs fewer by default
        parts.append(r["runs_at_once"])
    return f"  ({', '.join(parts)})" if parts else ""


def print_fit(out: dict) -> None:
    # vLLM's CPU backend: --gpu-mem-gib is the host memory its --gpu-memory-utilization takes a share of
    host = out["engine_options"].get("platform") == "cpu"
    where = (
        f"{format_bytes(out['card_memory_bytes'])} of host memory (vLLM's CPU backend)"
        if host
        else (f"{out['gpus']}× {out['card']} ({format_bytes(out['card_memory_bytes'])} each)")
    )
    print(f"{out['model']} on {where}, {out['engine']}, weights {out['weights']}, KV {out['kv_dtype']}")
    row = out["contexts"][0] if out["contexts"] else {}
    first = format_tokens(row["context"]) if row else "the first context"
    # llama.cpp over several GPUs: the figures of the GPU the first row shows, and the heaviest GPU's weights
    gpu = row.get("gpu")
    weights = row.get("weights_bytes", out["weights_bytes"]) if gpu else out["weights_bytes"]
    most = f" (the most on one GPU: {format_bytes(out['weights_bytes'])})" if weights != out["weights_bytes"] else ""
    print(
        f"{f'on {gpu}' if gpu else 'host' if host else 'per GPU'}: usable {format_bytes(out['usable_bytes'])}, weights "
        f"{format_bytes(weights)}{most}, overhead {format_bytes(out['overhead_bytes'])} and KV budget "
        f"{format_bytes(out['kv_budget_bytes'])} at {first} (the overhead column: at each context)"
    )
    print(f"max context for one sequence: {out['max_context']:,} tokens (limit {out['context_limit']:,})")
    print(f"rules: {out['engine_rules']}")
    if "vllm" in out:
        print("vLLM would log: " + out["vllm"]["log"])
    for note in out["notes"]:
        print(f"note: {note}")
    print(
        f"{'context':>8}  {'cache':>11}  {'overhead':>11}  {'total':>11}  {'headroom':>11}  {'fits':>4}  "
        f"{'concurrency':>11}"
    )
    for r in out["contexts"]:  # total = weights + cache + overhead
        cells = (format_bytes(r[k]) for k in ("cache_bytes", "overhead_bytes", "total_bytes", "headroom_bytes"))
        fits = "yes" if r["fits"] else "no"
        print(
            f"{format_tokens(r['context']):>8}  "
            + "  ".join(f"{c:>11}" for c in cells)
            + f"  {fits:>4}  {r.get('requests') or _count(r['max_concurrency']):>11}"
            + _count_note(r)
            + (
                f"  ({r['tightest_gpu']} has {format_bytes(r['tightest_headroom_bytes'])} left)"
                if "tightest_gpu" in r
                else ""
            )
        )


def cmd_cards(args: argparse.Namespace) -> dict:
    model = load_model(args.model)
    engine = build_engine(args)
    if args.weights is not None:
        format_named(args.weights)  # an unknown name is one error, not every card refused with it
    table = None
    if args.gpu_mem_gib is not None:  # one card by its figures, ranked among the listed ones
        custom = Card.custom(args.gpu_mem_gib, args.gpu_gbs, args.gpu_tflops)
        table = cards() | {custom.name: custom}
    elif figures_given(args):
        raise InputError("--gpu-gbs / --gpu-tflops are the figures of a card to rank with the rest: give --gpu-mem-gib")
    kv_dtype = checked_kv_dtype(engine, args.kv_dtype)
    answers = rank_cards(model, engine, args.context, args.weights, kv_dtype, table, args.gpus)
    return {
        "model": model.name,
        "engine": answers[0].result.setup.engine.name if answers[0].result else args.engine,
        "gpus": args.gpus,
        "context": args.context,
        "ranked_by": "fits at the context first, then " + COST_BASIS,
        "cards": [card_record(a) for a in answers],
    }


def _count(requests: float) -> str:
    """Whole sequences as a whole number; vLLM's fractional concurrency to two places."""
    return f"{requests:,.0f}" if requests == int(requests) else f"{floor_places(requests):,.2f}"


SEQS_NOTE = "* at once: vLLM's --max-num-seqs; the cache holds more (the JSON's requests)"


def _requests_cell(r: dict) -> str:
    """A finder row's requests at once: vLLM's --max-num-seqs (starred) where its scheduler runs fewer than the cache
    holds, as fit says."""
    if r.get("max_num_seqs"):
        return f"{r['max_num_seqs']:,}*"
    return "∞" if r["requests"] is None else _count(r["requests"])


def print_cards(out: dict) -> None:
    gpus = "one GPU" if out["gpus"] == 1 else f"{out['gpus']} GPUs of each card (figures per GPU)"
    print(f"{out['model']} on {out['engine']}, {gpus}, {format_tokens(out['context'])} tokens per request")
    print(f"ranked by: {out['ranked_by']}")
    print(f"{'card':<48} {'memory':>10} {'fits':>4} {'max context':>11} {'requests':>8}  weights / why not")
    for c in out["cards"]:
        requests = _requests_cell(c)
        tail = (f"{c['weights']}{', ' + c['split'] if c['split'] else ''}") if c["fits"] else c["why_not"]
        print(
            f"{c['card'][:48]:<48} {format_bytes(c['memory_bytes']):>10} {'yes' if c['fits'] else 'no':>4} "
            f"{format_tokens(c['max_context']):>11} {requests:>8}  {tail}"
        )
    if any("max_num_seqs" in c for c in out["cards"]):
        print(SEQS_NOTE)


def cmd_models(args: argparse.Namespace) -> dict:
    card = card_from(args)
    models = [load_model(m) for m in (args.models or list(presets()))]
    engine = build_engine(args)
    answers = rank_models(models, engine, card, args.context, args.gpus)
    return {
        "card": card.name,
        "card_memory_bytes": card.memory_bytes,
        "gpus": args.gpus,
        "engine": engine.name,
        "context": args.context,
        "ranked_by": "fits first, largest first (total parameters), each in the largest weight format and KV dtype "
        "that fit; then those that do not, smallest (closest to fitting) first",
        "models": [model_record(a) for a in answers],
    }


def print_models(out: dict) -> None:
    gpus = f"{out['gpus']}× " if out["gpus"] > 1 else ""
    print(
        f"{gpus}{out['card']} ({format_bytes(out['card_memory_bytes'])}{' each' if gpus else ''}), {out['engine']}, "
        f"{format_tokens(out['context'])} tokens"
    )
    print(f"ranked by: {out['ranked_by']}")
    print(f"{'model':<40} {'params':>8} {'fits':>4} {'weights':>8} {'KV':>9} {'max context':>11} {'requests':>8}")
    for m in out["models"]:
        requests = _requests_cell(m)
        line = (
            f"{m['model'][:40]:<40} {m['params'] / 1e9:>7.1f}B {'yes' if m['fits'] else 'no':>4} {m['weights']:>8} "
            f"{m['kv_dtype']:>9} {format_tokens(m['max_context']):>11} {requests:>8}"
        )
        print(line + (f"  {m['split']}" if m["split"] else "") + ("" if m["fits"] else f"  {m['why_not']}"))
    if any("max_num_seqs" in m for m in out["models"]):
        print(SEQS_NOTE)


def cmd_ollama(args: argparse.Namespace) -> dict:
    settings = OllamaSettings(
        num_ctx=args.num_ctx,
        num_parallel=args.num_parallel,
        kv_cache_type=args.kv_cache_type,
        flash_attention=None if args.flash_attention is None else args.flash_attention == "on",
        gpu_overhead=args.gpu_overhead,
    )
    if args.gpu:
        # one row per card (a card named twice is one row; several cards are not one multi-GPU host)
        cards = [with_figures(card_named(name), args.gpu_gbs, args.gpu_tflops) for name in args.gpu]
        cards = list({card.name: card for card in cards}.values())
        if args.gpu_mem_gib is not None:  # the named card's speed, this total memory (e.g. a 16 GB 4060 Ti)
            total = Card.custom(args.gpu_mem_gib)
            cards = [
                replace(
                    card,
                    name=f"{card.name} ({args.gpu_mem_gib:g} GiB)",
                    memory_bytes=total.memory_bytes,
                    basis=total.basis,
                )
                for card in cards
            ]
    elif args.gpu_mem_gib is not None:  # a card by its figures; its speed says which one is missing
        cards = [Card.custom(args.gpu_mem_gib, args.gpu_gbs, args.gpu_tflops)]
    elif figures_given(args):
        raise InputError("--gpu-gbs / --gpu-tflops are a card's figures: name it (--gpu) or give --gpu-mem-gib too")
    else:
        cards = [card_named(name) for name in DEFAULT_CARDS]
    hw, source = host(args.ram_gbs, args.threads)
    free = parse_free(args.free)
    return report([load_model(m) for m in args.models], cards, settings, args.weights, hw, source, free)


def cmd_speed(args: argparse.Namespace) -> dict:
    # vLLM's CPU backend (--platform cpu) runs on the host as --device cpu does; its --gpu-mem-gib is the memory it
    # sizes the cache in (as for `fit`), which the speed does not use
    vllm_cpu = args.engine == "vllm" and args.platform == "cpu"
    cpu_only = args.device == "cpu" or args.backend == "cpu" or vllm_cpu
    memory_given = args.gpu_mem_gib is not None and not vllm_cpu
    if cpu_only and (args.gpu is not None or memory_given or figures_given(args)):
        raise InputError(
            "--device cpu (--backend cpu, vLLM's --platform cpu) runs everything in system RAM; drop --gpu / "
            "--gpu-mem-gib / --gpu-gbs / --gpu-tflops"
        )
    if cpu_only and args.gpu_mem_gib is None:
        args.gpu_mem_gib = 1.0  # the Setup needs a card; with --device cpu nothing is placed on it
    for value in args.batch or ():
        if value <= 0:
            raise InputError("--batch must be positive")
    return speed_report(build_setup(args), args, cpu_only)


def cmd_autofit(args: argparse.Namespace) -> dict:
    frontend = FRONTENDS[args.frontend]
    sequences = args.parallel or frontend.n_parallel
    unified = args.kv_unified
    server_slots = args.frontend == "llama-server" and not args.parallel
    if unified is None and args.parallel and args.frontend == "llama-server":
        unified = False  # giving -np keeps llama-server's kv_unified off (common/arg.cpp:1724)
    forced = server_slots and unified is False
    if server_slots:  # no -np: tools/server/server.cpp makes 4 slots and a unified cache, whatever -kvu said
        unified = True
    outputs = sequences if args.parallel and args.frontend == "llama-server" else None  # its slots' logits rows
    engine = configured(
        "llama.cpp", frontend=args.frontend, kv_unified=unified, build=args.llamacpp_build, n_outputs_max=outputs
    )
    engine = with_run_flags(engine, args)
    checked_kv_dtype(engine, args.kv_dtype)
    gguf_type(args.weights, "llama.cpp")
    setup = Setup(
        model=load_model(args.model),
        engine=engine,
        card=free_card(card_from(args), parse_free(args.free)),
        weights=args.weights,
        kv_dtype=args.kv_dtype,
    )
    n_ctx, steps = args.ctx_size, ()
    if forced:
        steps = ("--no-kv-unified without -np: llama-server makes 4 slots and turns the unified cache on anyway",)
    if n_ctx is None and args.frontend == "ollama":  # Ollama always passes -c: num_ctx × np, its default by VRAM
        num_ctx = request_ctx(setup.model, OllamaSettings(num_parallel=sequences), setup.card.memory_bytes)
        n_ctx = num_ctx * sequences
        steps += (f"Ollama passes -c {n_ctx:,}: its default num_ctx for the card ({num_ctx:,}) × {sequences} slot(s)",)
    choice = fit_params(setup, n_ctx, sequences, args.n_gpu_layers, args.fit_target * MIB, args.fit_ctx)
    return autofit_record(setup, replace(choice, steps=steps + choice.steps), sequences)


def cmd_cluster(args: argparse.Namespace) -> dict:
    checked_kv_dtype(configured("vllm"), args.kv_dtype)
    cluster = Cluster(card_from(args), args.nodes, args.gpus_per_node)
    layout = parse_layout(args.layout) if args.layout else None
    if layout is not None and args.expert_parallel is not None and layout.expert_parallel != args.expert_parallel:
        said = "--expert-parallel" if args.expert_parallel else "--no-expert-parallel"
        raise InputError(
            f"--layout {args.layout} {'has no' if args.expert_parallel else 'ends in'} 'ep' but {said} is given: "
            "say expert parallel in one place (',ep' at the end of --layout)"
        )
    return cluster_report(
        load_model(args.model),
        cluster,
        args.context,
        weights=args.weights,
        kv_dtype=args.kv_dtype,
        expert_parallel=args.expert_parallel,
        gpu_memory_utilization=args.gpu_memory_utilization,
        pp_inside_nodes=args.pp_inside_nodes,
        layout=layout,
        max_num_seqs=args.max_num_seqs,
    )


def cmd_resolve(args: argparse.Namespace) -> dict:
    if args.config == "-":
        text = sys.stdin.buffer.read(MAX_CONFIG_BYTES + 1)  # parse_json refuses more than the limit
    else:
        text = read_regular_file(Path(args.config).expanduser(), MAX_CONFIG_BYTES, "a config.json")
    return resolve(parse_json(text, args.config))


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m core", description="kvscope: LLM cache and memory sizing")
    sub = parser.add_subparsers(dest="command", required=True)

    size = sub.add_parser("size", help="per-layer cache account of a model")
    size.add_argument("model", help="Hugging Face repo id, bundled preset, or path to a config.json")
    add_engine_options(size)
    add_kv_dtype_flag(size)
    size.add_argument("--context", type=tokens, action="append", help="tokens, e.g. 32768 or 32k (repeatable)")
    size.add_argument("--batch", type=positive_int, default=1, help="concurrent sequences (default 1)")
    add_json_flag(size)
    size.set_defaults(run=cmd_size, show=print_size)

    fitp = sub.add_parser("fit", help="does a model fit a card: max context, concurrency, the context table")
    fitp.add_argument(
        "model",
        help="Hugging Face repo id, bundled preset, path to a config.json, or Hub GGUF name (org/repo-GGUF:QUANT: "
        "the config of the model its header names, the weights from its header)",
    )
    add_card_options(fitp, "card name, e.g. 'RTX 4090', H100, 'A100 40GB'", split=True)
    fitp.add_argument(
        "--weights",
        type=format_name,
        help="weight format, e.g. bf16, fp8, int4-awq, mxfp4, Q4_K_M (default: the checkpoint's)",
    )
    add_kv_dtype_flag(fitp)
    fitp.add_argument(
        "--weights-file",
        help="exact sizes from a .gguf, .safetensors (file or folder), Hub repo id, or Hub GGUF name as llama.cpp's "
        "-hf and Ollama write it (org/repo:QUANT, hf.co/org/repo:QUANT; only its header is read)",
    )
    add_engine_options(fitp)
    fitp.add_argument("--context", type=tokens, action="append", help="tokens, e.g. 32k (repeatable)")
    fitp.add_argument("--kv-cache-memory-bytes", type=byte_count, help="vLLM: KV budget per GPU in bytes")
    fitp.add_argument("--max-model-len", type=tokens, help="vLLM: longest request")
    fitp.add_argument("--gpu-memory-utilization", type=finite_float, help="vLLM (default 0.92)")
    fitp.add_argument(
        "--n-gpu-layers",
        "-ngl",
        type=int32,
        dest="n_gpu_layers",
        help="llama.cpp: layers offloaded to the GPU (default: all)",
    )
    add_cpu_moe_options(fitp)
    add_json_flag(fitp)
    fitp.set_defaults(run=cmd_fit, show=print_fit)

    cardsp = sub.add_parser("cards", help="every card ranked for a model: fits?, max context, requests")
    cardsp.add_argument("model", help="Hugging Face repo id, bundled preset, or path to a config.json")
    cardsp.add_argument("--context", type=tokens, default=DEFAULT_CONTEXT, help="tokens per request (default 8K)")
    cardsp.add_argument("--weights", type=format_name, help="weight format (default: the checkpoint's)")
    add_kv_dtype_flag(cardsp)
    cardsp.add_argument("--gpu-mem-gib", type=gpu_gib, help="also rank a card of this memory in GiB")
    cardsp.add_argument("--gpus", type=positive_int, default=1, help=GPUS_HELP)
    add_card_figures(cardsp, "the --gpu-mem-gib card", named=False)
    add_engine_options(cardsp)
    add_json_flag(cardsp)
    cardsp.set_defaults(run=cmd_cards, show=print_cards)

    modelsp = sub.add_parser("models", help="every bundled model ranked for a card, in the best format that fits")
    modelsp.add_argument("models", nargs="*", help="repo ids, presets or config paths (default: every bundled preset)")
    add_card_options(modelsp, "card name, e.g. 'RTX 4060 8GB', H100", split=False)
    modelsp.add_argument("--context", type=tokens, default=DEFAULT_CONTEXT, help="tokens per request (default 8K)")
    modelsp.add_argument("--gpus", type=positive_int, default=1, help=GPUS_HELP)
    add_engine_options(modelsp)
    add_json_flag(modelsp)
    modelsp.set_defaults(run=cmd_models, show=print_models)

    ollamap = sub.add_parser("ollama", help="Ollama's layer split and num_ctx per card, kvscope's account, the speed")
    ollamap.add_argument("models", nargs="+", metavar="MODEL", help="repo ids, presets or config paths")
    ollamap.add_argument("--gpu", action="append", help=f"card name (repeatable; default: {', '.join(DEFAULT_CARDS)})")
    ollamap.add_argument(
        "--gpu-mem-gib", type=gpu_gib, help="total memory in GiB of the --gpu card(s), or of a card by --gpu-gbs and "
        "--gpu-tflops without --gpu",
    )  # fmt: skip
    add_card_figures(ollamap, "the card(s)")
    ollamap.add_argument("--free", help="free GPU memory as Ollama logs it, e.g. 7.1GiB (default: the whole card)")
    ollamap.add_argument("--num-ctx", type=tokens, help="num_ctx per request, e.g. 32k (default: Ollama's by VRAM)")
    ollamap.add_argument("--num-parallel", type=positive_int, default=1, help="OLLAMA_NUM_PARALLEL (default 1)")
    ollamap.add_argument("--kv-cache-type", default="f16", help=f"OLLAMA_KV_CACHE_TYPE: {', '.join(OLLAMA_KV_TYPES)}")
    ollamap.add_argument("--flash-attention", choices=("on", "off"), help="OLLAMA_FLASH_ATTENTION (default unset)")
    ollamap.add_argument("--gpu-overhead", type=byte_size, default=0, help="OLLAMA_GPU_OVERHEAD: bytes or e.g. 512MiB")
    ollamap.add_argument("--weights", type=format_name, default="q4_k_m", help="GGUF weight format (default q4_k_m)")
    ollamap.add_argument(
        "--ram-gbs", help=f"host RAM bandwidth in GB/s, or '{MEASURED}' (default: a typical DDR5-5600 desktop)"
    )
    ollamap.add_argument("--threads", type=thread_count, help="CPU threads for layers in RAM (default 8)")
    add_json_flag(ollamap)
    ollamap.set_defaults(run=cmd_ollama, show=print_report)

    speed = sub.add_parser("speed", help="how fast: decode, aggregate and prefill tok/s, time to first token")
    speed.add_argument("model", help="Hugging Face repo id, bundled preset, or path to a config.json")
    add_card_options(speed, "card name, e.g. 'RTX 4090', H100 (needs a bandwidth and peak figure)", split=True)
    speed.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="cpu: no GPU, all in system RAM")
    speed.add_argument(
        "--weights", type=format_name, help="weight format, e.g. bf16, fp8, Q4_K_M (default: the checkpoint's)"
    )
    add_kv_dtype_flag(speed)
    add_engine_options(speed)
    speed.add_argument("--context", type=tokens, action="append", help="tokens, e.g. 32k (repeatable)")
    speed.add_argument("--batch", type=positive_int, action="append", help="concurrent sequences (repeatable)")
    speed.add_argument("--n-gpu-layers", "-ngl", type=int32, dest="n_gpu_layers", help="llama.cpp: layers on the GPU")
    add_cpu_moe_options(speed)
    speed.add_argument("--threads", type=thread_count, help="CPU threads for layers in RAM (default: all cores)")
    speed.add_argument("--ram-gbs", type=gb_per_s, help="system RAM bandwidth in GB/s (default: measured here, cached)")
    speed.add_argument(
        "--pcie-gbs", type=gb_per_s, help="llama.cpp: host-to-GPU GB/s at which a prompt's passes of 32+ tokens copy "
        "the weights of layers in RAM to the GPU (op offload; default 25, PCIe 4.0 x16 at an assumed 80 %%)",
    )  # fmt: skip
    speed.add_argument(
        "--cpu-isa", choices=("avx512", "avx2", "other"), help="the host CPU's vector ISA, which sets llama.cpp's "
        "quantised prefill rate on it (default: this machine's where its RAM is measured here; with --ram-gbs, "
        "not known: the factors pooled over CPUs)",
    )  # fmt: skip
    add_speed_flags(speed)
    add_json_flag(speed)
    speed.set_defaults(
        run=cmd_speed,
        show=print_speed,
        weights_file=None,
        kv_cache_memory_bytes=None,
        max_model_len=None,
        gpu_memory_utilization=None,
    )

    add_calibrate_parser(sub)

    autofitp = sub.add_parser("autofit", help="what llama.cpp's --fit picks for -c and -ngl on a card (llama-server)")
    autofitp.add_argument("model", help="Hugging Face repo id, bundled preset, or path to a config.json")
    add_card_options(autofitp, "card name, e.g. 'RTX 4060 8GB'", split=False)
    autofitp.add_argument("--weights", type=format_name, default="q4_k_m", help="GGUF weight format (default q4_k_m)")
    autofitp.add_argument("--free", help="free GPU memory, e.g. 7.1GiB (default: the whole card)")
    add_kv_dtype_flag(autofitp)
    autofitp.add_argument(
        "--frontend", choices=("llama-server", "llama-cli", "ollama"), default="llama-server", help="whose defaults"
    )
    autofitp.add_argument("--ctx-size", "-c", type=tokens, help="-c: total context (default 0: the model's, fitted)")
    autofitp.add_argument("--parallel", "-np", type=positive_int, help="-np: sequences (default: the front end's)")
    autofitp.add_argument(
        "--kv-unified", action=argparse.BooleanOptionalAction, default=None, help="one cell buffer for all sequences"
    )
    autofitp.add_argument("--n-gpu-layers", "-ngl", type=int32, dest="n_gpu_layers", help="-ngl (default: fitted)")
    autofitp.add_argument("--fit-target", type=positive_int, default=1024, help="MiB to leave free (default 1024)")
    autofitp.add_argument("--fit-ctx", type=positive_int, default=4096, help="smallest context it sets (default 4096)")
    add_run_flags(autofitp)
    add_build_option(autofitp)
    add_json_flag(autofitp)
    autofitp.set_defaults(run=cmd_autofit, show=print_autofit)

    clusterp = sub.add_parser("cluster", help="vLLM on nodes × GPUs: every TP × PP × DP (EP) plan, best first")
    clusterp.add_argument("model", help="Hugging Face repo id, bundled preset, or path to a config.json")
    add_card_options(clusterp, "card name, e.g. H100, H200", split=False)
    clusterp.add_argument("--nodes", type=positive_int, default=1, help="nodes (default 1)")
    clusterp.add_argument("--gpus-per-node", type=positive_int, default=8, help="GPUs in each node (default 8)")
    clusterp.add_argument("--context", type=tokens, default=DEFAULT_CONTEXT, help="tokens per request (default 8K)")
    clusterp.add_argument("--weights", type=format_name, help="weight format (default: the checkpoint's)")
    add_kv_dtype_flag(clusterp)
    clusterp.add_argument(
        "--expert-parallel",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="MoE: only plans with (or without) --enable-expert-parallel (default: both)",
    )
    clusterp.add_argument("--pp-inside-nodes", action="store_true", help="also plans with PP stages inside a node")
    clusterp.add_argument(
        "--max-num-seqs", type=positive_int, help="requests one engine core runs at once (default: `vllm serve`'s for "
        "the card: 1024 from 70 GiB but A100, else 256)",
    )  # fmt: skip
    clusterp.add_argument("--layout", help="one plan instead of the search: TP,PP,DP[,ep], e.g. 1,1,16,ep")
    clusterp.add_argument("--gpu-memory-utilization", type=finite_float, default=0.92, help="vLLM (default 0.92)")
    add_json_flag(clusterp)
    clusterp.set_defaults(run=cmd_cluster, show=print_cluster)

    add_probe_parser(sub)
    add_check_parser(sub)

    res = sub.add_parser("resolve", help="print a config.json with its architecture's defaults applied")
    res.add_argument("config", help="path to config.json, or - for standard input")
    res.set_defaults(run=cmd_resolve, show=None, json=True)
    return parser


def _json_ready(value: object) -> object:
    """Infinity (the requests that fit when a setup needs no cache on the GPU) is written as null, as the cards and
    models records write an unlimited count; JSON itself has no infinity."""
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    return value


def json_text(out: dict) -> str | None:
    """`out` as strict JSON (never the `Infinity` or `NaN` that Python's json writes by default), or None when a
    figure is NaN, which is a fault to report, not a result."""
    try:
        return json.dumps(_json_ready(out), indent=2, allow_nan=False)
    except ValueError:
        return None


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the usage block (15-26 lines) buried the message; --help still shows it."""

    def error(self, message: str) -> NoReturn:
        flag = re.match(r"argument (--[\w-]+)", message)
        if flag and message.endswith("expected one argument"):  # a value that starts with '-' reads as an option
            message += f" (a value that starts with '-' is written {flag.group(1)}=VALUE)"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out = args.run(args)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except RecursionError:  # a last guard: parse_json refuses deep nesting before anything recurses
        print("error: the input is nested too deeply to be a model config", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: out of memory sizing this input; check its layer count and widths", file=sys.stderr)
        return 2
    try:
        if args.json or args.show is None:
            text = json_text(out)
            if text is None:
                print("error: a figure came out as NaN (not a number); please report this input", file=sys.stderr)
                return 2
            print(text)
        else:
            args.show(out)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader closed early (`| head`): not an error of ours, and no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush does not fail again
    return 0
