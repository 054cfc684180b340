"""Fact-check: every published figure kvscope knows, recomputed under the settings its source states.

A figure comes from `measurements/published.jsonl` or `measurements/claims.jsonl` (one JSON object a line; see
`measurements/README.md`). `check_figure` recomputes it with kvscope's engines and says whether the two agree:
they agree when the published value lies within half a unit of its last printed digit (a whole unit for figures
printed as approximate) of kvscope's value, or of the range kvscope gives when a stated setting is itself rounded.
Pure: reads the two files, never the Hub, never torch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from core.argtypes import add_json_flag
from core.engines import Engine, configured
from core.engines.vllm_engine import VllmEngine
from core.engines.vllm_pipeline import pipeline_capacity
from core.errors import InputError
from core.fit import Setup, Solver
from core.memory.gpus import Card, card_named
from core.memory.weightfiles import WeightFile
from core.model.layers import GatedDeltaNet
from core.model.loading import model_from_config, preset_path
from core.model.spec import ModelSpec
from core.model.whatif import all_full_attention
from core.units import GIB, MIB, format_bytes

MEASUREMENTS = Path(__file__).resolve().parent.parent / "measurements"
FILES = ("published.jsonl", "claims.jsonl")
AGREES, DISAGREES, CANNOT = "agrees", "disagrees", "cannot check"
VERDICTS = (AGREES, DISAGREES, CANNOT)

# bytes per unit as printed; "bytes…" is how published.jsonl spells values already in bytes
BYTE_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 1 << 10, "MiB": MIB, "GiB": GIB}
TWIN_UNITS = {"GB": "GiB", "MB": "MiB", "KB": "KiB", "GiB": "GB", "MiB": "MB", "KiB": "KB"}  # slips between them
# what kvscope cannot check to a figure's printed precision, and why (speed is a roofline fitted to other runs than
# the seeds'; peaks depend on the harness)
SPEED = (
    "kvscope's speed model (core/speed) is a roofline whose efficiencies for the engines of the seeds' timed figures "
    "are fitted to other published runs (vLLM's, cross-checked between labs) or assumed (transformers' on a GPU), so "
    "it cannot judge a timed figure to its printed digits; its prediction and error for the seeds' figures are in "
    "measurements/speed/published_speed.jsonl (make bench-speed), and they are in those engines' error bars"
)
UNCHECKABLE = {
    "decode_tok_s": SPEED,
    "prefill_tok_s": SPEED,
    "speed_gain": SPEED,
    "peak_allocated_bytes": "the peak of an HF eager prefill holds the logits of every prompt position, which "
    "kvscope does not model (its engines keep the last token's logits only)",
    "duration_s": "a wall-clock time of the source's own harness",
}


# --- figures -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    id: str
    metric: str
    model: str
    value: float  # as printed, in `unit`
    unit: str
    printed: str  # the figure as the source printed it (number and unit only)
    context: int | None
    setup: Mapping[str, Any] = field(hash=False)
    source: str  # the document, by title or id
    source_kind: str
    basis: str  # measured / derived
    file: str
    record: Mapping[str, Any] = field(hash=False, repr=False, compare=False)

    @property
    def scale(self) -> float:
        """Base units (bytes, tokens, requests, ×) per printed unit."""
        if self.unit.startswith("bytes"):
            return 1
        return BYTE_UNITS.get(self.unit, 1)

    @property
    def base(self) -> float:
        return self.value * self.scale

    @property
    def tolerance(self) -> float:
        """Half a unit of the last printed digit, in base units; a whole unit when printed as approximate."""
        return _last_digit(self.text) * (1 if self.record.get("approx") else 0.5) * self.scale

    @property
    def text(self) -> str:
        """The figure as printed, or its value to the digits it was recorded with."""
        return self.printed or f"{self.value:.15g}"


def _last_digit(text: str) -> float:
    """The place of the last significant digit: '4.0' → 0.1, '8.49' → 0.01, '30' → 10, '32,768' → 1."""
    match = re.search(r"\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?", text)
    if not match:
        return 1.0
    try:
        number = Decimal(match.group().replace(",", ""))
    except InvalidOperation:
        return 1.0
    if number == number.to_integral_value() and "." not in match.group() and "e" not in match.group().lower():
        digits = match.group().replace(",", "")
        return float(10 ** (len(digits) - len(digits.rstrip("0")))) if digits.strip("0") else 1.0
    exponent = number.normalize().as_tuple().exponent if "e" in match.group().lower() else number.as_tuple().exponent
    return float(Decimal(1).scaleb(exponent))


def _slug(*parts: object) -> str:
    text = "-".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def _source(record: Mapping[str, Any]) -> tuple[str, str]:
    source = record.get("source")
    if isinstance(source, str):
        return source, ""
    if isinstance(source, Mapping):
        name = source.get("title") or source.get("document") or source.get("id") or source.get("url")
        return str(name or source.get("kind") or "unnamed source"), str(source.get("kind") or "")
    return "unnamed source", ""


def _basis(record: Mapping[str, Any]) -> str:
    """published.jsonl predates the field: a figure its source computed from the config is derived."""
    if record.get("basis"):
        return str(record["basis"])
    return "derived" if record.get("setup", {}).get("engine") == "config arithmetic" else "measured"


def figure_from(record: Mapping[str, Any], file: str = "") -> Figure:
    for key in ("metric", "model", "value"):
        if key not in record:
            raise InputError(f"{file or 'a figure'}: a line has no {key!r}: {json.dumps(record)[:120]}")
    value = record["value"]
    if not isinstance(value, int | float):
        raise InputError(f"{file}: value {value!r} of {record['metric']} is not a number")
    source, kind = _source(record)
    unit = str(record.get("unit", ""))
    as_printed = re.match(r"bytes \((\w+) as printed", unit)
    if as_printed and as_printed.group(1) in BYTE_UNITS:
        unit = as_printed.group(1)
        value = float(f"{value / BYTE_UNITS[unit]:.12g}")
    printed = str(record.get("printed") or "")
    context = record.get("context")
    fid = record.get("id") or _slug(record["metric"], record["model"].split("/")[-1], context, value)
    return Figure(
        id=str(fid),
        metric=str(record["metric"]),
        model=str(record["model"]),
        value=float(value),
        unit=unit,
        printed=printed,
        context=int(context) if context is not None else None,
        setup=dict(record.get("setup") or {}),
        source=source,
        source_kind=kind,
        basis=_basis(record),
        file=file,
        record=dict(record),
    )


def load_figures(folder: Path = MEASUREMENTS) -> list[Figure]:
    """Every figure of both files; a line that does not parse is an error naming the file and line."""
    figures: list[Figure] = []
    for name in FILES:
        path = folder / name
        if not path.exists():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{name} line {n} is not JSON: {err.msg}") from None
            figures.append(figure_from(record, name))
    seen: dict[str, str] = {}
    for f in figures:
        if f.id in seen:
            raise InputError(f"figure id {f.id!r} appears twice ({seen[f.id]} and {f.file})")
        seen[f.id] = f.file
    return figures


# --- kvscope's side ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """kvscope's figure in base units, the range a rounded setting allows, and the arithmetic behind it."""

    value: float
    lines: tuple[str, ...]
    low: float | None = None
    high: float | None = None
    note: str = ""  # said whatever the verdict
    why: str = ""  # said when the figures disagree


@dataclass(frozen=True)
class Unchecked:
    reason: str


def _model(name: str, setup: Mapping[str, Any], record: Mapping[str, Any]) -> ModelSpec:
    """A bundled preset (never the Hub); 'X (Y layout)' is checked on Y's config; `config` carries one inline."""
    if record.get("config"):
        model = model_from_config(dict(record["config"]), name)
    else:
        layout = re.search(r"\(([^()]+) layout\)", name)
        key = layout.group(1) if layout else name
        path = preset_path(key) or preset_path(key.split("/")[-1])
        if path is None:
            raise InputError(f"kvscope has no bundled config for {name!r}")
        model = model_from_config(json.loads(path.read_text(encoding="utf-8")), name)
    if setup.get("variant") == "all full attention":
        model = all_full_attention(model)
    return model


def _version(setup: Mapping[str, Any]) -> str | None:
    version = setup.get("engine_version")
    match = re.match(r"(\d+)\.(\d+)", str(version or ""))
    return f"{match.group(1)}.{match.group(2)}" if match else None


def _engine(setup: Mapping[str, Any]) -> Engine:
    name = str(setup.get("engine") or "transformers")
    if name == "config arithmetic":  # the source multiplied config fields: transformers stores exactly those
        name = "transformers"
    return configured(
        name,
        version=_version(setup) if name == "vllm" else None,
        tensor_parallel=setup.get("tensor_parallel"),
        pipeline_parallel=setup.get("pipeline_parallel"),
        max_num_batched_tokens=setup.get("max_num_batched_tokens"),
        prefix_caching=setup.get("prefix_caching"),
    )


def _kv(engine: Engine, model: ModelSpec, setup: Mapping[str, Any]) -> str:
    """The stated KV dtype in the engine's spelling; the model's own dtype is 'auto'."""
    kv = str(setup.get("kv_dtype") or "auto").lower()
    return "auto" if kv == model.dtype else kv


def _gib(text: object) -> tuple[float, float, float]:
    """A budget as stated ('54.94 GiB' or 4.99), with the range its rounding allows, in bytes."""
    number = str(text).replace("GiB", "").strip()
    step = _last_digit(number) / 2
    value = float(number)
    return value * GIB, (value - step) * GIB, (value + step) * GIB


def _kind_lines(engine: Engine, model: ModelSpec, context: int, batch: int, kv: str, what: str) -> list[str]:
    account = engine.account(model, context, batch, kv)
    out = []
    for line in account.lines:
        if what == "token" and line.token_bytes_total:
            out.append(
                f"{line.count} {line.label} layers × {line.bytes_per_token:,} B/token × {line.tokens_held:,} tokens"
                f"{f' × {batch}' if batch > 1 else ''} = {line.token_bytes_total:,} B"
            )
        if what == "fixed" and line.fixed_bytes_total:
            out.append(
                f"{line.count} {line.label} layers × {line.fixed_bytes:,} B{f' × {batch}' if batch > 1 else ''}"
                f" = {line.fixed_bytes_total:,} B"
            )
    return out


def _rate(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    storage = engine.storage(model, kv)
    lines = []
    for label, layers in _grouped(model).items():
        per = layers[0].bytes_per_token(engine.layer_storage(layers[0], storage))
        if per:
            lines.append(f"{len(layers)} {label} layers × {per:,} B = {len(layers) * per:,} B/token")
    value = engine.kv_bytes_per_token(model, kv)
    lines.append(f"{engine.name}, KV {engine.kv_dtype(model, kv).name}: {value:,} B per token")
    return Estimate(value, tuple(lines))


def _grouped(model: ModelSpec) -> dict[str, list]:
    from core.model.spec import kind_label

    out: dict[str, list] = {}
    for layer in model.layers:
        out.setdefault(kind_label(layer), []).append(layer)
    return out


def _state_miscounts(model: ModelSpec) -> dict[str, int]:
    """Ways a Gated DeltaNet state gets miscounted, each as the total it gives (for naming a source's slip)."""
    gdn = [layer for layer in model.layers if isinstance(layer, GatedDeltaNet)]
    if not gdn:
        return {}
    g, n = gdn[0], len(gdn)
    matrix = g.num_v_heads * g.k_head_dim * g.v_head_dim
    return {
        "state counted in bf16 without the conv buffer": n * matrix * 2,
        "state counted in fp32 without the conv buffer": n * matrix * 4,
        f"one fp32 vector per head counted instead of each value head's {g.k_head_dim} × {g.v_head_dim} matrix": n
        * (g.num_k_heads * g.k_head_dim + g.num_v_heads * g.v_head_dim)
        * 4,
    }


def _fixed(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    value = engine.fixed_bytes_per_sequence(model, kv)
    lines = _kind_lines(engine, model, 1, 1, kv, "fixed")
    storage = engine.storage(model, kv)
    for layer in model.layers[:1] + tuple(x for x in model.layers if x.state_tensors())[:1]:
        for t in layer.state_tensors():
            lines.append(f"  {t.name} {t.shape} in {getattr(storage, t.role).name}: {t.bytes(storage):,} B per layer")
    lines.append(f"{engine.name}: {value:,} B ({value / 1e6:.1f} MB) per sequence, whatever the context")
    why = ""
    for slip, total in _state_miscounts(model).items():
        if abs(total - f.base) <= f.tolerance:
            why = f"{slip}: {_show(total, f)} vs {_show(value, f)} in {engine.name}"
    return Estimate(value, tuple(lines), why=why)


def _cache(f: Figure, model: ModelSpec, engine: Engine, kv: str, part: str) -> Estimate:
    context, batch = _context_batch(f)
    account = engine.account(model, context, batch, kv)
    value = {"total": account.total, "token": account.token_bytes}[part]
    lines = _kind_lines(engine, model, context, batch, kv, "token")
    if part == "total":
        lines += _kind_lines(engine, model, context, batch, kv, "fixed")
    lines.append(f"{engine.name}: {value:,} B = {format_bytes(value)} = {value / 1e9:.2f} GB")
    note = why = ""
    if part == "token" and account.fixed_bytes:
        note = f"K/V only; the fixed state adds {format_bytes(account.fixed_bytes)} per sequence in {engine.name}"
    if part == "total" and account.fixed_bytes and f.scale > 1:
        # read the figure in whichever of its decimal or binary unit lies nearer kvscope's total (see _unit_slip)
        twin = BYTE_UNITS.get(TWIN_UNITS.get(f.unit, f.unit), f.scale)
        scale = min((f.scale, twin), key=lambda k: abs(f.value * k - value))
        implied, step = f.value * scale - account.token_bytes, _last_digit(f.text) / 2 * scale
        note = (
            f"the fixed part this figure implies is {implied / 1e6:,.1f} ± {step / 1e6:.1f} MB "
            f"(kvscope: {account.fixed_bytes / 1e6:.1f} MB)"
        )
        if abs(account.token_bytes - f.base) <= f.tolerance:
            why = (
                f"the K/V part alone is {format_bytes(account.token_bytes)}; "
                f"the state adds {format_bytes(account.fixed_bytes)}"
            )
    return Estimate(value, tuple(lines), note=note, why=why)


def _context_batch(f: Figure) -> tuple[int, int]:
    """llama.cpp splits n_ctx over its parallel slots; elsewhere the context is per sequence."""
    slots = int(f.setup.get("n_parallel") or f.setup.get("batch") or 1)
    if f.setup.get("n_ctx"):
        return -(-int(f.setup["n_ctx"]) // slots), slots
    if f.context is None:
        raise InputError(f"{f.id}: no context stated")
    return f.context, slots


def _vllm_capacity(f: Figure, model: ModelSpec, engine: Engine, kv: str, what: str) -> Estimate:
    if not isinstance(engine, VllmEngine):
        raise InputError(f"{f.id}: a start-up log figure needs the vLLM engine")
    max_len = int(f.setup.get("max_model_len") or f.context)
    stages = f.setup.get("kv_pool_gib_per_stage")
    pool = f.record.get("available_kv_bytes_reported") or f.setup.get("kv_pool_gib_per_gpu")
    if stages:
        budgets = [_gib(s) for s in stages]
        caps = [pipeline_capacity(engine, model, [b[i] for b in budgets], max_len, kv) for i in range(3)]
        pool_text = " and ".join(f"{s} GiB" for s in stages) + " per stage"
    elif pool is not None:
        caps = [engine.capacity(model, int(b), max_len, kv) for b in _gib(pool)]
        pool_text = f"{str(pool).replace(' GiB', '')} GiB per GPU"
    else:
        raise InputError(f"{f.id}: no KV pool stated")
    plan = engine.plan(model, kv)
    cap = caps[0]
    values = [c.max_concurrency if what == "concurrency" else c.kv_cache_tokens for c in caps]
    in_flight = engine.in_flight_tokens(model, max_len)
    per_group = [engine.blocks_for(plan, g, max_len, max_len, in_flight, admission=True) for g in plan.groups]
    lines = (
        f"vLLM {engine.options.version} rules: block {plan.block_size} tokens, {len(plan.groups)} layer group(s) of "
        f"{plan.group_size}, {plan.bytes_per_block:,} B per block",
        f"pool {pool_text} → {cap.num_blocks:,} blocks (range {caps[1].num_blocks:,}–{caps[2].num_blocks:,} from the "
        "pool's rounding)",
        f"a {max_len:,}-token request reserves {' + '.join(map(str, per_group))} = {cap.blocks_per_request} blocks "
        f"(one term per layer group) → concurrency {cap.num_blocks:,} / {cap.blocks_per_request} = "
        f"{cap.max_concurrency:.2f}",
        f"KV cache size: {cap.kv_cache_tokens:,} tokens",
    )
    why = ""
    if any(g.page.kind == "state" for g in plan.groups) and not stages and what == "concurrency":
        other = engine.with_options(prefix_caching=not engine.options.prefix_caching)
        alt = other.capacity(model, int(_gib(pool)[0]), max_len, kv)
        why = (
            f"the pool holds {cap.num_blocks:,} blocks of {plan.block_size} tokens and a request reserves "
            f"{cap.blocks_per_request}: {cap.max_concurrency:.2f} "
            f"({alt.max_concurrency:.2f} with prefix caching {'on' if other.options.prefix_caching else 'off'})"
        )
    return Estimate(values[0], lines, low=min(values), high=max(values), why=why)


def _card(setup: Mapping[str, Any]) -> Card:
    gpu = setup.get("gpu")
    if gpu is None and setup.get("gpu_memory_gib"):
        return Card.custom(float(setup["gpu_memory_gib"]))
    return card_named(str(gpu))


def _solver(f: Figure, model: ModelSpec, engine: Engine, weights: str | None = None) -> Solver:
    stated = f.setup.get("weights_bytes")
    weights_file = None
    if stated and weights is None:  # the source's own weight size stands in for kvscope's estimate
        weights_file = WeightFile("stated by the source", "stated", int(stated), (), 0, int(stated))
    return Solver(
        Setup(
            model=model,
            engine=engine,
            card=_card(f.setup),
            weights=weights or f.setup.get("weights"),
            kv_dtype=_kv(engine, model, f.setup),
            gpu_memory_utilization=float(f.setup.get("gpu_memory_utilization") or 0.92),
            weights_file=weights_file,
        )
    )


def _budget_lines(s: Solver, context: int) -> list[str]:
    items = ", ".join(f"{i.label} {format_bytes(i.bytes)}" for i in s.overhead(context))
    return [
        f"{s.setup.card.name}: usable {format_bytes(s.usable)}; weights {format_bytes(s.weights)} ({s.format}); "
        f"{items}",
        f"KV budget at {context:,} tokens: {format_bytes(s.budget(context))}",
    ]


def _max_context(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    s = _solver(f, model, engine)
    value = s.max_context()
    lines = _budget_lines(s, max(value, 1))
    lines.append(
        f"{engine.name}: {engine.kv_bytes_per_token(model, kv):,} B/token + "
        f"{engine.fixed_bytes_per_sequence(model, kv):,} B fixed → longest context that fits: {value:,} tokens"
    )
    note = ""
    if f.setup.get("weights_bytes"):
        own = _solver(f, model, engine, weights=str(f.setup.get("weights_format_for_estimate") or "Q4_K_M"))
        weights = f"{own.format} weights ({format_bytes(own.weights)})"
        note = f"with kvscope's own {weights} instead: {own.max_context():,} tokens"
    return Estimate(value, tuple(lines), note=note)


def _concurrency(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    if isinstance(engine, VllmEngine):
        return _vllm_capacity(f, model, engine, kv, "concurrency")
    s = _solver(f, model, engine)
    context = int(f.context or 0)
    value = s.concurrency(context)
    lines = _budget_lines(s, context)
    cache, grows = s.cache(context), s.batch_overhead(context)
    if grows:  # transformers prefills a batch's prompts together: each sequence brings its own activations
        budget = max(0, s.budget(context))
        lines.append(
            f"one {context:,}-token sequence: {format_bytes(cache)} of cache and {format_bytes(grows)} of its own "
            f"prefill activations and logits (generate() prefills the batch together) → ⌊({format_bytes(budget)} + "
            f"{format_bytes(grows)}) ÷ ({format_bytes(cache)} + {format_bytes(grows)})⌋ = {value:,.0f} sequences"
        )
    else:
        lines.append(f"one {context:,}-token sequence: {format_bytes(cache)} → {value:,.0f} sequences")
    return Estimate(value, tuple(lines))


def _same_memory(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    other = _model(str(f.setup["reference_model"]), {}, {})
    count = int(f.setup["reference_count"])
    context = int(f.context or 0)
    mine, theirs = engine.account(model, context, 1, kv).total, engine.account(other, context, 1, kv).total
    value = count * theirs // mine
    lines = (
        f"{other.name} at {context:,} tokens: {theirs:,} B per sequence × {count} = {count * theirs:,} B",
        f"{model.name} at {context:,} tokens: {mine:,} B per sequence → ⌊{count * theirs:,} / {mine:,}⌋ = {value}",
    )
    return Estimate(value, lines)


def _weights(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    s = _solver(f, model, engine)
    kernel = f" + {format_bytes(s.relaid)} re-laid by the {s.kernel.name} kernel" if s.kernel else ""
    lines = (f"{model.name} in {s.format} on {s.setup.card.name}: {s.weights_total:,} B{kernel}",)
    return Estimate(s.weights_total, lines)


def _logits(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    size = 2 if model.dtype in ("bf16", "fp16") else 4
    value = int(f.context or 0) * model.vocab_size * size
    return Estimate(value, (f"{f.context:,} positions × vocab {model.vocab_size:,} × {size} B = {value:,} B",))


def _context_limit(f: Figure, model: ModelSpec, engine: Engine, kv: str) -> Estimate:
    if model.max_context is None:
        raise InputError(f"{model.name} states no max_position_embeddings")
    return Estimate(model.max_context, (f"max_position_embeddings in the config: {model.max_context:,}",))


METRICS: dict[str, Callable[[Figure, ModelSpec, Engine, str], Estimate]] = {
    "kv_bytes_per_token": _rate,
    "fixed_state_bytes": _fixed,
    "cache_bytes": lambda f, m, e, kv: _cache(f, m, e, kv, "total"),
    "kv_cache_bytes": lambda f, m, e, kv: _cache(f, m, e, kv, "token"),
    "max_concurrency": _concurrency,
    "kv_cache_tokens": lambda f, m, e, kv: _vllm_capacity(f, m, e, kv, "tokens"),
    "max_context": _max_context,
    "sequences_in_same_memory": _same_memory,
    "weights_loaded_bytes": _weights,
    "logits_bytes": _logits,
    "context_limit": _context_limit,
}


def _part(f: Figure, spec: Mapping[str, Any]) -> Figure:
    """A numerator or denominator of a ratio: the parent figure with the part's own metric, model and settings."""
    record = {**f.record, **spec, "setup": {**f.setup, **spec.get("setup", {})}, "value": 1, "id": f.id}
    record.pop("printed", None)
    return figure_from(record, f.file)


def _ratio(f: Figure) -> Estimate:
    num, den = (estimate(_part(f, f.record[k])) for k in ("numerator", "denominator"))
    if isinstance(num, Unchecked) or isinstance(den, Unchecked):
        raise InputError("a part of this ratio cannot be computed")
    scale = 100 if f.unit == "%" else 1
    value = num.value / den.value * scale
    ends = [a / b for a in _ends(num) for b in _ends(den)]
    lines = (
        "numerator:",
        *("  " + x for x in num.lines),
        "denominator:",
        *("  " + x for x in den.lines),
        f"{num.value:,.6g} / {den.value:,.6g}{' × 100' if scale != 1 else ''} = {value:.4g}",
    )
    # each part's own note beside the term it qualifies: the ratio is of the terms, not of the notes' alternatives
    notes = [
        f"{which} {e.value:,.0f} ({e.note})" if abs(e.value) >= 100 else f"{which} {e.value:.4g} ({e.note})"
        for which, e in (("numerator", num), ("denominator", den))
        if e.note
    ]
    return Estimate(value, lines, low=min(ends) * scale, high=max(ends) * scale, note="; ".join(notes))


def _ends(e: Estimate) -> tuple[float, float]:
    return (e.value if e.low is None else e.low, e.value if e.high is None else e.high)


def estimate(f: Figure) -> Estimate | Unchecked:
    """kvscope's figure under `f`'s settings, or why it has none."""
    if f.metric in UNCHECKABLE:
        return Unchecked(UNCHECKABLE[f.metric])
    if f.record.get("cannot_check"):
        return Unchecked(str(f.record["cannot_check"]))
    if f.metric == "ratio":
        return _ratio(f)
    compute = METRICS.get(f.metric)
    if compute is None:
        return Unchecked(f"kvscope has no rule for the metric {f.metric!r}")
    try:
        model = _model(f.model, f.setup, f.record)
    except InputError as err:
        return Unchecked(str(err))
    engine = _engine(f.setup)
    est = compute(f, model, engine, _kv(engine, model, f.setup))
    limit = model.max_context
    if isinstance(est, Estimate) and f.context and limit and int(f.context) > limit:
        past = (
            f"{int(f.context):,} tokens is past {model.name}'s {limit:,}-token limit (its config's "
            "max_position_embeddings; `fit` refuses it): counted as the source asks"
        )
        est = replace(est, note="; ".join(n for n in (est.note, past) if n))
    return est


# --- verdicts ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    figure: Figure
    kvscope: float | None  # in the figure's printed unit
    verdict: str
    reason: str
    kvscope_lines: tuple[str, ...] = ()
    compared_with: str = "kvscope"  # or "another source" when two published figures are set against each other
    other: float | None = None  # the other source's figure, in the same unit

    @property
    def ratio(self) -> float | None:
        """kvscope ÷ published; None where kvscope computed nothing (two sources set against each other)."""
        return self.kvscope / self.figure.value if self.kvscope is not None and self.figure.value else None

    def record(self) -> dict[str, Any]:
        f = self.figure
        return {
            "id": f.id,
            "metric": f.metric,
            "model": f.model,
            "context": f.context,
            "published": f.value,
            "printed": f.printed or f"{f.text} {f.unit}",
            "unit": f.unit,
            "kvscope": self.kvscope,
            "ratio": self.ratio,
            "verdict": self.verdict,
            "reason": self.reason,
            "compared_with": self.compared_with,
            "other_source": self.other,  # the other source's figure where two are compared, in the same unit
            "source": f.source,
            "source_kind": f.source_kind,
            "basis": f.basis,
            "settings": dict(f.setup),
            "published_arithmetic": f.record.get("derivation") or "",
            "kvscope_arithmetic": list(self.kvscope_lines),
        }


def _show(base: float, f: Figure) -> str:
    """A kvscope value in the figure's unit, to its printed digits, one more where those would hide a difference."""
    value = base / f.scale
    digits = max(0, -math.floor(math.log10(_last_digit(f.text))))
    hidden = abs(round(value, digits) - value) > 1e-9 * max(1.0, abs(value))
    if hidden and round(value, digits + 1) != round(value, digits):
        digits += 1
    unit = {"x": "×", "%": "%", "": ""}.get(f.unit, f" {f.unit}")
    return f"{value:,.{digits}f}{unit}"


def _unit_slip(f: Figure, kvscope: float) -> str:
    """A decimal unit printed where the binary one was meant (or the reverse) that the figure agrees under."""
    meant = TWIN_UNITS.get(f.unit)
    if meant and abs(kvscope / BYTE_UNITS[meant] - f.value) <= _last_digit(f.text) / 2 + 1e-9:
        return (
            f"{meant} printed as {f.unit}: kvscope's {kvscope:,.0f} B is {f.value:g} {meant} "
            f"= {kvscope / BYTE_UNITS[f.unit]:.2f} {f.unit}"
        )
    return ""


def _cross(f: Figure, figures: list[Figure]) -> Check | None:
    """A figure set against the same quantity in another source's figures (when kvscope cannot compute it)."""
    spec = f.record.get("cross_check")
    if not spec:
        return None

    def find(selector: Mapping[str, Any]) -> Figure:
        hits = [g for g in figures if all(g.record.get(k) == v for k, v in selector.items()) and g.id != f.id]
        if len(hits) != 1:
            raise InputError(f"{f.id}: cross-check selector {dict(selector)} matches {len(hits)} figures")
        return hits[0]

    num, den = find(spec["numerator"]), find(spec["denominator"])
    other = (num.base / den.base - 1) * 100 if f.unit == "%" else num.base / den.base
    agrees = abs(other - f.value) <= f.tolerance
    reason = (
        f"{'the two sources agree' if agrees else 'the two sources disagree on the same run'}: "
        f"{num.source} gives {num.value:g} / {den.value:g} = {other:+.0f}{f.unit}, this source {f.printed}"
    )
    return Check(f, None, AGREES if agrees else DISAGREES, reason, compared_with="another source", other=other)


def check_figure(f: Figure, figures: list[Figure] | None = None) -> Check:
    cross = _cross(f, figures or [])
    if cross is not None:
        return cross
    try:
        est = estimate(f)
    except InputError as err:
        return Check(f, None, CANNOT, str(err))
    if isinstance(est, Unchecked):
        return Check(f, None, CANNOT, est.reason)
    low = est.value if est.low is None else est.low
    high = est.value if est.high is None else est.high
    agrees = low - f.tolerance - 1e-9 * abs(f.base) <= f.base <= high + f.tolerance + 1e-9 * abs(f.base)
    ours = _show(est.value, f)
    span = f" ({_show(low, f)} to {_show(high, f)} over the rounding of the stated pool)"
    span = span if _show(low, f) != _show(high, f) else ""
    if agrees:
        reason = f"kvscope gives {ours}{span}"
    else:
        slip = _unit_slip(f, est.value) if f.scale > 1 else ""
        reason = est.why or slip or f"kvscope gives {ours}{span}, not {f.text}"
        if est.why or slip:
            reason += f" (kvscope {ours})" if ours not in reason else ""
        elif abs(est.value / f.base - 1) < 0.01:
            reason += f": within {abs(est.value / f.base - 1):.1%}, but outside the printed precision"
    if est.note:
        reason += f"; {est.note}"
    return Check(f, est.value / f.scale, AGREES if agrees else DISAGREES, reason, est.lines)


def check_all(figures: list[Figure] | None = None) -> list[Check]:
    figures = load_figures() if figures is None else figures
    return [check_figure(f, figures) for f in figures]


# --- command line (`python -m core check`) -------------------------------------------------------------------------
def _matches(c: Check, model: str | None, metric: str | None, verdict: str | None) -> bool:
    return (
        (model is None or model.lower() in c.figure.model.lower())
        and (metric is None or metric == c.figure.metric)
        and (verdict is None or verdict == c.verdict)
    )


def cmd_check(args: Any) -> list[dict[str, Any]]:
    checks = [c for c in check_all() if _matches(c, args.model, args.metric, args.verdict)]
    if args.id:
        checks = [c for c in checks if c.figure.id == args.id]
        if not checks:
            raise InputError(f"no figure with id {args.id!r}; `python -m core check` lists them")
    return [c.record() for c in checks]


def verdict_counts(out: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Per verdict: how many records have it, and how many of those set two sources against each other (kvscope
    computed nothing there); the command line's count line and the page's metrics."""
    counts = []
    for verdict in VERDICTS:
        of = [r for r in out if r["verdict"] == verdict]
        counts.append((verdict, len(of), sum(r["compared_with"] != "kvscope" for r in of)))
    return counts


def count_line(out: list[dict[str, Any]]) -> str:
    """`28 agrees, 19 disagrees, 20 cannot check`, naming the verdicts between two sources."""
    return ", ".join(
        f"{n} {verdict}" + (f" ({cross} of them between two sources)" if cross else "")
        for verdict, n, cross in verdict_counts(out)
    )


def print_check(out: list[dict[str, Any]]) -> None:
    for r in out:
        print(f"{r['verdict'].upper():13} {r['model']}  {r['metric']}  [{r['id']}]")
        if r["compared_with"] == "kvscope":
            ours = "—" if r["kvscope"] is None else f"{r['kvscope']:,.6g}"
            ratio = "—" if r["ratio"] is None else f"{r['ratio']:.3g}"
            against = f"kvscope {ours} {r['unit']}  ratio {ratio}"
        else:
            against = f"{r['compared_with']} {r['other_source']:,.6g} {r['unit']} (kvscope computes nothing here)"
        print(f"    published {r['printed']}  {against}  ({r['source']})")
        print(f"    {r['reason']}")
    print(count_line(out))


def add_check_parser(sub: Any) -> None:
    p = sub.add_parser("check", help="fact-check the published figures kvscope knows, under their own settings")
    p.add_argument("--model", help="only figures whose model contains this text")
    p.add_argument("--metric", help="only this metric, e.g. kv_bytes_per_token")
    p.add_argument("--verdict", choices=VERDICTS, help="only figures with this verdict")
    p.add_argument("--id", help="one figure, by its id")
    add_json_flag(p)
    p.set_defaults(run=cmd_check, show=print_check)
