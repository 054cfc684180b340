"""Plain records of a fit for tables, charts, downloads and the verdict sentence."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, replace

from core.engines import Engine
from core.engines.hf_transformers import TransformersEngine
from core.engines.llamacpp import LlamaCppEngine
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError
from core.fit import Fit, Row, Setup, Solver, cache_in_ram, default_split, own_format, setup_format
from core.memory.quant import FORMATS, default_format, format_named
from core.model.params import count_params
from core.model.spec import ModelSpec
from core.units import GIB, floor_places, format_bytes, format_tokens, plural, tokens_phrase


def table_records(fit: Fit) -> list[dict]:
    """One record per context: the context table for the card, in bytes."""
    return [
        {
            "context": r.context,
            "cache_bytes": r.cache_bytes,
            "weights_bytes": r.weights_bytes,
            "overhead_bytes": r.overhead_bytes,
            "total_bytes": r.total_bytes,
            "headroom_bytes": r.headroom_bytes,
            "memory_used": min(r.total_bytes / fit.usable_bytes, 9.99) if fit.usable_bytes else 9.99,  # fraction
            "fits": r.fits,
            "max_concurrency": r.max_concurrency,
        }
        | ({"gpu": r.gpu} if r.gpu else {})  # llama.cpp over several GPUs: the one these figures are
        # and the GPU with the least left, where it is another (Row.tightest)
        | ({"tightest_gpu": r.tightest, "tightest_headroom_bytes": r.tightest_headroom_bytes} if r.tightest else {})
        | ({"slots": r.slots} if r.slots else {})  # the front end's slots, not memory, bound the requests
        | ({"n_ctx": r.n_ctx} if r.n_ctx else {})  # a unified cache: the -c those requests need
        | ({"max_num_seqs": r.max_num_seqs} if r.max_num_seqs else {})  # vLLM's scheduler runs no more at once
        # llama.cpp's front end runs this many at once by default (Ollama, llama-cli): the count needs a setting
        | (front_end_record(fit, r) if r.front_end_runs else {})
        for r in fit.rows
    ]


def front_end_record(fit: Fit, row: Row) -> dict:
    """What llama.cpp's front end runs at once by default, and how the row's count of requests would run."""
    assert isinstance(fit.setup.engine, LlamaCppEngine)
    runs = fit.setup.engine.runs_phrase(int(row.max_concurrency))
    return {"front_end_runs": row.front_end_runs, "runs_at_once": runs}


def display_records(fit: Fit) -> list[dict]:
    """The context table as shown (and downloaded): what decides first (fits, requests), then the GiB parts."""
    return [
        {
            "context": format_tokens(r["context"]),
            "fits": r["fits"],
            # no count where the cache is all in system RAM (cache_in_ram): a grid shows infinity as "Infinity"
            "requests": None if math.isinf(r["max_concurrency"]) else floor_places(r["max_concurrency"]),
            "memory used (%)": r["memory_used"] * 100,
            "total (GiB)": r["total_bytes"] / GIB,
            "cache (GiB)": r["cache_bytes"] / GIB,
            "weights (GiB)": r["weights_bytes"] / GIB,
            "overhead (GiB)": r["overhead_bytes"] / GIB,
            "headroom (GiB)": r["headroom_bytes"] / GIB,
        }
        | ({"GPU": r["gpu"]} if "gpu" in r else {})
        for r in table_records(fit)
    ]


def csv_text(records: list[dict], leading: dict) -> str:
    """The table as CSV: the `leading` columns (the inputs that produced it) on every row, then each record's, its
    floats to the 3 digits the page shows; a missing value (None, NaN) is an empty cell."""

    def cell(value):
        if isinstance(value, float):
            return "" if math.isnan(value) else round(value, 3)
        return "" if value is None else value

    columns = [*leading, *(k for k in (records[0] if records else {}) if k not in leading)]
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: cell(v) for k, v in (leading | r).items()} for r in records)
    return out.getvalue()


def constant_table(fit: Fit) -> bool:
    """Every row the same but the context: a pure state-space model, whose cache does not grow. (With every layer
    in system RAM, -ngl 0, the GPU holds no cache either: not this.)"""
    first = fit.rows[0]
    return (
        len(fit.rows) > 1 and bool(first.account.lines)
        and all((r.total_bytes, r.max_concurrency) == (first.total_bytes, first.max_concurrency) for r in fit.rows)
    )  # fmt: skip


def unlimited(fit: Fit) -> bool:
    """No position limit of its own, and even the search cap fits: the cap is ours, not the model's."""
    return fit.setup.model.max_context is None and fit.max_context >= fit.context_limit


def max_context_text(fit: Fit) -> str:
    if unlimited(fit):
        return "no limit"
    return format_tokens(fit.max_context) if fit.max_context else "none"


def cache_help(fit: Fit) -> str:
    """What the cache figure covers: one request, as its engine allocates it."""
    engine = fit.setup.engine
    if isinstance(engine, LlamaCppEngine) and engine.fixed_slots():
        slots = engine.slots(1)
        return f"per GPU, one request as llama-server allocates it: its cells, and {slots} slots' windows and states"
    return "per GPU, one sequence"


def requests_text(fit: Fit, row: Row) -> str:
    """Requests of this length at once; vLLM's fractional count only when at least one fits."""
    n = row.max_concurrency
    if n == float("inf"):
        return IN_RAM if cache_in_ram(fit, row) else "unlimited"
    if not row.fits:
        return f"none ({floor_places(n):.2f} of one)" if fit.vllm is not None and n > 0 else "none"
    if row.slots:
        return f"{row.slots} (every slot, -c {row.n_ctx:,})"
    if row.max_num_seqs:
        return f"{row.max_num_seqs:,} (--max-num-seqs; the cache holds {floor_places(n):,.2f})"
    if row.front_end_runs:
        assert isinstance(fit.setup.engine, LlamaCppEngine)
        return f"{int(n):,} ({fit.setup.engine.runs_phrase(int(n))})"
    return f"{floor_places(n):,.2f}" if fit.vllm is not None else f"{int(n):,}"


IN_RAM = "— (cache in system RAM)"


def layers_in_ram(setup: Setup) -> bool:
    """llama.cpp leaves decoder layers (-ngl) or routed experts (--n-cpu-moe) in system RAM: the host's RAM
    bandwidth and threads then enter the speed."""
    return (setup.gpu_layers is not None and setup.gpu_layers <= len(setup.model.layers)) or bool(setup.cpu_experts)


def short_of(excess: int) -> str:
    """ "1.12 MiB more than ": the shortfall named, so two totals that print alike still differ (vLLM's next block)."""
    return f"{format_bytes(excess)} more than " if excess > 0 else "more than "


def cache_kind(fit: Fit, row: Row) -> str:
    """`KV bf16`, or what a model without attention keeps instead, or where the cache is when not on the GPU."""
    if cache_in_ram(fit, row):
        return "cache in system RAM"
    if any(line.bytes_per_token for line in row.account.lines):
        return f"KV {row.account.kv_dtype}"
    return "no KV cache, fixed state only" if row.account.fixed_bytes else "no cache"


def engine_format_warning(engine: Engine, weights: str, model: ModelSpec | None = None) -> str | None:
    """A weight format the engine does not load as such (GGUF k-quants are llama.cpp's; AWQ/GPTQ/FP8/NVFP4 are not),
    or, given the model, one that quantises only what the model lacks (MXFP4: routed experts)."""
    weights = format_named(weights).name  # as typed: Q4_K_M, F16
    gguf = FORMATS[weights].gguf is not None
    if model is not None and weights in ("mxfp4", "mxfp4_moe") and not count_params(model).experts:
        rest = "Q8_0" if weights == "mxfp4_moe" else "16-bit"
        return (
            f"{weights} quantises only routed experts (gpt-oss's format), and {model.name} has none: every weight "
            f"stays {rest}, so this is the {rest} size; pick a format that quantises every layer."
        )
    if isinstance(engine, LlamaCppEngine) and weights == "mxfp4":
        return "llama.cpp runs GGUF files; its type for MXFP4 experts is mxfp4_moe (experts MXFP4, the rest Q8_0)."
    if isinstance(engine, LlamaCppEngine) and not gguf and FORMATS[weights].quantises:  # a quantised checkpoint
        return f"llama.cpp runs GGUF files; {weights} checkpoints need converting first (e.g. to q8_0 or q4_k_m)."
    if isinstance(engine, VllmEngine) and gguf:
        return (
            f"vLLM serves GGUF ({weights}) only experimentally and dequantises some tensors; "
            "pick awq, gptq, fp8 or bf16 for a reliable vLLM estimate."
        )
    if isinstance(engine, TransformersEngine) and gguf:
        sized = f": sized here as the checkpoint's {default_format(model)}" if model else ""  # fit.setup_format
        return (
            f"transformers dequantises GGUF ({weights}) weights to 16/32-bit when loading, so {weights} sizes do not "
            f"apply{sized}; pick bf16, fp8, awq or gptq."
        )
    return None


def format_note(setup: Setup) -> str | None:
    """What fit and speed say of the weights' format on the engine: the one asked for, else the checkpoint's own as
    sized (engine_format_warning); nothing for a weights file, whose bytes are its own."""
    if setup.weights_file is not None:
        return None
    return engine_format_warning(setup.engine, setup.weights or setup_format(setup), setup.model)


def checkpoint_note(setup: Setup) -> str | None:
    """Where the format sized is not the one the checkpoint ships (its quantization_config): the explorer always
    sizes its Weights box's choice, so an uploaded GPTQ-Int8 config would read as q4_k_m without a word."""
    if not setup.weights or "quantization_config" not in setup.model.config or setup.weights_file is not None:
        return None
    try:
        own = default_format(setup.model)
    except InputError as err:  # a quantization kvscope does not count: the Weights box's format is the estimate
        return f"The weights are sized as {setup.weights}, the format chosen: {err}."
    if own == format_named(setup.weights).name:
        return None
    return (
        f"This checkpoint ships its weights as {own} (its quantization_config); the figures are for "
        f"{setup.weights}, the format chosen (Weights)."
    )


def format_offer(setup: Setup) -> str | None:
    """The checkpoint's own format as the engine loads it (own_format), to offer in the Weights box's place where the
    engine does not load the chosen format as such (format_note), or where the checkpoint ships quantised weights the
    engine loads as they are (checkpoint_note); None where the engine would not load that one as such either."""
    if not setup.weights or setup.weights_file is not None:
        return None
    try:
        own = own_format(setup.model, setup.engine)
        as_shipped = "quantization_config" in setup.model.config and own == default_format(setup.model)
    except InputError:  # a quantization kvscope does not count: nothing of its own to offer
        return None
    if own == format_named(setup.weights).name or not (as_shipped or format_note(setup)):
        return None
    return None if engine_format_warning(setup.engine, own, setup.model) else own


def check(setup: Setup) -> None:
    """Raise InputError when the engine cannot run this setup at all (a split, a head count, a layout)."""
    solver = Solver(setup)
    solver.row(min(solver.limit, 4096))


def gpu_counts(setup: Setup, most: int = 16) -> list[int]:
    """GPU counts (up to `most`) that the engine can split this model over, with its default split."""
    out = []
    for n in range(1, most + 1):
        tp, pp = default_split(setup.engine, n)
        try:
            check(replace(setup, gpus=n, tp=tp, pp=pp))
        except InputError:
            continue
        out.append(n)
    return out


def breakdown_records(fit: Fit) -> list[dict]:
    """Per context: weights, growing (attention) cache, fixed state and overhead, per GPU: the row's own cache
    (vLLM's fullest pipeline stage, llama.cpp's deciding GPU, transformers' even share) parted as its account is."""
    out = []
    for r in fit.rows:
        whole = r.account.total
        growing = r.cache_bytes * r.account.token_bytes // whole if whole else 0
        out.append(
            {
                "label": format_tokens(r.context),
                "weights": r.weights_bytes,
                "attention cache": growing,
                "fixed state": r.cache_bytes - growing,
                "overhead": r.overhead_bytes,
                "usable": fit.usable_bytes,
                "gpu": r.gpu,  # llama.cpp over several GPUs: whose bars these are ("" otherwise)
            }
        )
    return out


@dataclass(frozen=True)
class Verdict:
    fits: bool
    headline: str
    sentence: str


def verdict(fit: Fit, row: Row) -> Verdict:
    s = fit.setup
    where = f"{s.gpus}× {s.card.name}" if s.gpus > 1 else s.card.name
    what = f"{s.model.name} ({fit.weights_format} weights, {s.engine.name}, {cache_kind(fit, row)}) on {where}"
    if row.weights_bytes > fit.usable_bytes:
        return Verdict(
            False,
            "Does not fit",
            f"{what}: the weights alone ({format_bytes(row.weights_bytes)}) "
            f"exceed the {format_bytes(fit.usable_bytes)} usable per GPU.",
        )
    if not row.fits:
        longest = (
            f"the longest single context that fits is {format_tokens(fit.max_context)} tokens"
            if fit.max_context
            else "not even a short context fits beside the weights"
        )
        return Verdict(
            False,
            "Does not fit",
            f"{what}: {tokens_phrase(row.context)} needs {format_bytes(row.total_bytes)}, "
            f"{short_of(row.total_bytes - fit.usable_bytes)}the {format_bytes(fit.usable_bytes)} usable; {longest}.",
        )
    n = row.max_concurrency
    if unlimited(fit):
        reach = (
            "its cache does not grow with context, so one sequence has no length limit here "
            f"(checked up to {format_tokens(fit.context_limit)} tokens)"
        )
    else:
        reach = f"one sequence can reach {format_tokens(fit.max_context)} tokens"
    if cache_in_ram(fit, row):
        requests = (
            f"the cache is in system RAM (-ngl {s.gpu_layers}), which bounds the requests of "
            f"{format_tokens(row.context)} that can run at once; kvscope does not size the host's RAM"
        )
    elif n == float("inf"):
        requests = f"an unlimited number of requests of {format_tokens(row.context)} can run at once"
    elif row.slots:
        requests = (
            f"{row.slots} requests of {format_tokens(row.context)} can run at once with -c {row.n_ctx:,}, every slot "
            "llama.cpp makes (-np N makes N)"
        )
    elif row.max_num_seqs:
        requests = (
            f"{row.max_num_seqs:,} requests of {format_tokens(row.context)} can run at once, as many as vLLM's "
            f"scheduler takes (--max-num-seqs {row.max_num_seqs:,}); the cache holds {floor_places(n):,.2f}"
        )
    elif row.front_end_runs:
        assert isinstance(fit.setup.engine, LlamaCppEngine)
        requests = (
            f"{int(n):,} requests of {format_tokens(row.context)} can run at once "
            f"{fit.setup.engine.runs_phrase(int(n))}"
        )
    else:
        requests = f"{plural(n, 'request', requests_text(fit, row))} of {format_tokens(row.context)} can run at once"
        if row.n_ctx and n > 1:  # a unified cache: they share one -c
            requests += f" with -c {row.n_ctx:,}"
    spare = f"{format_bytes(row.headroom_bytes)} to spare"
    if row.tightest:  # another GPU than the row's has less left: the spare memory is its
        spare = (
            f"{format_bytes(row.tightest_headroom_bytes)} to spare on {row.tightest}, the least of any GPU (the "
            f"table shows {row.gpu}, which fits the fewest requests)"
        )
    return Verdict(True, "Fits", f"{what}: {tokens_phrase(row.context)} fits with {spare}; {reach}; {requests}.")
