"""`python -m core`: the command-line face of the sizing core. Flags named in issues are a contract."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from core.config import parse_json, resolve
from core.engines import ENGINES, engine_named
from core.errors import InputError
from core.loading import load_model
from core.units import format_bytes, format_tokens, parse_tokens

DEFAULT_CONTEXTS = (4096, 32768, 131072)


def _contexts(values: list[int] | None, model_max: int | None) -> list[int]:
    if values:
        return values
    return [c for c in DEFAULT_CONTEXTS if model_max is None or c <= model_max] or [model_max or 4096]


def cmd_size(args: argparse.Namespace) -> dict:
    model = load_model(args.model)
    engine = engine_named(args.engine)
    contexts = _contexts(args.context, model.max_context)
    accounts = [engine.account(model, n, args.batch, args.kv_dtype) for n in contexts]
    storage = engine.storage(model, args.kv_dtype)
    return {
        "model": model.name,
        "model_type": model.model_type,
        "engine": engine.name,
        "kv_dtype": accounts[0].kv_dtype,
        "state_dtypes": {"conv": storage.conv.name, "ssm": storage.ssm.name, "linear": storage.linear.name},
        "batch": args.batch,
        "kv_bytes_per_token": engine.kv_bytes_per_token(model, args.kv_dtype),
        "fixed_bytes_per_sequence": engine.fixed_bytes_per_sequence(model, args.kv_dtype),
        "layers": model.layer_counts(),
        "max_context": model.max_context,
        "notes": list(model.notes),
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


def print_size(out: dict) -> None:
    print(f"{out['model']} ({out['model_type']}) on {out['engine']}, KV {out['kv_dtype']}, batch {out['batch']}")
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


def cmd_resolve(args: argparse.Namespace) -> dict:
    text = sys.stdin.read() if args.config == "-" else Path(args.config).read_text(encoding="utf-8")
    return resolve(parse_json(text, args.config))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _tokens(text: str) -> int:
    try:
        return parse_tokens(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description="kvscope: LLM cache and memory sizing")
    sub = parser.add_subparsers(dest="command", required=True)

    size = sub.add_parser("size", help="per-layer cache account of a model")
    size.add_argument("model", help="Hugging Face repo id, bundled preset, or path to a config.json")
    size.add_argument("--engine", default="transformers", choices=sorted(ENGINES))
    size.add_argument("--kv-dtype", default="auto")
    size.add_argument("--context", type=_tokens, action="append", help="tokens, e.g. 32768 or 32k (repeatable)")
    size.add_argument("--batch", type=_positive_int, default=1)
    size.add_argument("--json", action="store_true")
    size.set_defaults(run=cmd_size, show=print_size)

    res = sub.add_parser("resolve", help="print a config.json with its architecture's defaults applied")
    res.add_argument("config", help="path to config.json, or - for standard input")
    res.set_defaults(run=cmd_resolve, show=None, json=True)
    return parser


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
    if args.json or args.show is None:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        args.show(out)
    return 0
