"""Finders: which card for this model, which model for this card. Every answer is `fit` run on each candidate;
the finders only choose the candidates and order the results.

Ranking rules (shown to the user with the results):
- cards: those that fit the asked context first, cheapest first. The card table has no prices, so memory size
  stands in for cost (smaller card first) and the output says so. Cards that do not fit follow, those that get
  closest (longest context) first, each with the reason it falls short.
- models: those that fit the card first, the largest (total parameters) first, each in the best weight format and
  KV dtype that fit. "Best" is most bytes: a format ladder ordered by the bytes its weights take (the checkpoint's
  own format at the top), the weights' precision chosen before the cache's (an 8-bit cache costs less quality than
  halving the weights' bits).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.dtypes import dtype_named
from core.engines import Engine
from core.engines.base import sized_weights
from core.engines.hf_transformers import TransformersEngine
from core.engines.llamacpp import LlamaCppEngine
from core.engines.vllm_engine import VllmEngine
from core.errors import InputError
from core.fit import Fit, Setup, Solver, context_limit, fit, on_gpus, own_format, validate
from core.memory.gpus import Card, cards
from core.memory.quant import format_named
from core.model.params import count_params
from core.model.spec import ModelSpec
from core.ollama_report import TYPICAL_RAM_GB_S, TYPICAL_THREADS
from core.report import max_context_text, requests_text
from core.speed.predict import Hardware, predict, prefill_chunk, prefill_spans, untimed
from core.units import format_bytes, format_tokens

DEFAULT_CONTEXT = 8192  # what the finders ask about when no context is given
COST_BASIS = "memory size (the card table has no prices; a smaller card stands in for a cheaper one)"

# Formats each engine loads as such (core.report.engine_format_warning); the ladder keeps those no larger than
# the checkpoint's own.
LADDERS: dict[type, tuple[str, ...]] = {
    TransformersEngine: ("bf16", "fp8", "int8", "awq"),
    VllmEngine: ("bf16", "fp8", "int8", "awq"),
    LlamaCppEngine: ("gguf_bf16", "q8_0", "q6_k", "q5_k_m", "q4_k_m", "q3_k_m", "q2_k"),
}
# KV dtypes worth trying, full precision first; "auto" is the engine's own default.
KV_LADDERS: dict[type, tuple[str, ...]] = {
    TransformersEngine: ("auto",),
    VllmEngine: ("auto", "fp8"),
    LlamaCppEngine: ("auto", "q8_0", "q4_0"),
}


@dataclass(frozen=True)
class CardAnswer:
    card: Card
    context: int  # the context asked, capped at the model's limit
    fits: bool  # one sequence of `context` fits
    max_context: int
    requests: float  # sequences of `context` at once
    weights_format: str
    weights_bytes: int
    usable_bytes: int
    why_not: str | None
    result: Fit | None  # None when the engine cannot run the model on this card at all


def _why_not(result: Fit, context: int) -> str:
    row = result.rows[0]
    if result.weights_bytes > result.usable_bytes:
        return (
            f"the weights ({format_bytes(result.weights_bytes)}) exceed the card's usable "
            f"{format_bytes(result.usable_bytes)}"
        )
    if result.max_context == 0:
        return (
            f"weights and overhead ({format_bytes(result.weights_bytes + row.overhead_bytes)}) leave no room for "
            f"the cache in {format_bytes(result.usable_bytes)}"
        )
    return (
        f"only {format_tokens(result.max_context)} tokens fit: {format_tokens(context)} needs "
        f"{format_bytes(row.total_bytes)} of {format_bytes(result.usable_bytes)}"
    )


def card_answer(setup: Setup, context: int) -> CardAnswer:
    """`fit` for one card at `context`, or why the engine cannot run it there."""
    try:
        result = fit(setup, [context])
    except InputError as err:
        return CardAnswer(setup.card, context, False, 0, 0.0, "", 0, setup.card.memory_bytes, str(err), None)
    row = result.rows[0]
    return CardAnswer(
        card=setup.card,
        context=context,
        fits=row.fits,
        max_context=result.max_context,
        requests=row.max_concurrency,
        weights_format=result.weights_format,
        weights_bytes=result.weights_bytes,
        usable_bytes=result.usable_bytes,
        why_not=None if row.fits else _why_not(result, context),
        result=result,
    )


def card_order(answer: CardAnswer) -> tuple:
    if answer.fits:
        return (0, answer.card.memory_bytes, answer.card.name)
    return (1, -answer.max_context, answer.card.memory_bytes, answer.card.name)


@dataclass(frozen=True)
class RunOptions:
    """How the model runs, the same on every card: vLLM's --gpu-memory-utilization, llama.cpp's -ngl and
    --n-cpu-moe (Setup's fields; None and empty keep Setup's defaults). -ngl and --n-cpu-moe name one model's
    layers, so they apply where the model is one (cards for a model), not to a list of models."""

    utilization: float | None = None
    gpu_layers: int | None = None
    cpu_experts: range = range(0)

    @classmethod
    def of(cls, setup: Setup) -> RunOptions:
        """The run options a setup (the sidebar's) carries."""
        return cls(setup.gpu_memory_utilization, setup.gpu_layers, setup.cpu_experts)

    def applied(self, setup: Setup) -> Setup:
        chosen = {"gpu_memory_utilization": self.utilization} if self.utilization is not None else {}
        return replace(setup, gpu_layers=self.gpu_layers, cpu_experts=self.cpu_experts, **chosen)


def rank_cards(
    model: ModelSpec,
    engine: Engine,
    context: int,
    weights: str | None = None,
    kv_dtype: str = "auto",
    table: dict[str, Card] | None = None,
    gpus: int = 1,
    run: RunOptions = RunOptions(),
) -> list[CardAnswer]:
    """Every card (`gpus` of each, split the engine's way), fitting ones first and smallest first, then the closest
    misses; each run as `run` says (as on Fit a card)."""
    if context <= 0:
        raise InputError(f"context must be positive, got {context}")
    setups = [
        on_gpus(run.applied(Setup(model=model, engine=engine, card=card, weights=weights, kv_dtype=kv_dtype)), gpus)
        for card in (table or cards()).values()
    ]
    if setups:
        validate(setups[0])  # a split the model cannot take is one error, not a column of them
    limit = context_limit(setups[0]) if setups else context
    if context > limit:  # the same on every card: one error, not a column of them
        raise InputError(
            f"context {format_tokens(context)} is above {model.name}'s limit of {format_tokens(limit)} tokens; "
            f"ask for {format_tokens(limit)} or less"
        )
    answers = [card_answer(setup, context) for setup in setups]
    return sorted(answers, key=card_order)


# --- models for a card ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelAnswer:
    model: ModelSpec
    params: int  # total parameters
    fits: bool
    weights_format: str  # the best that fits, the smallest tried when none does; past its limit, the first holding it
    kv_dtype: str
    max_context: int
    requests: float  # at the asked context
    context: int
    why_not: str | None
    result: Fit | None


def _ladder_type(engine: Engine) -> type:
    for kind in LADDERS:
        if isinstance(engine, kind):
            return kind
    raise InputError(f"no weight-format ladder for engine {engine.name}")


def weight_ladder(model: ModelSpec, engine: Engine) -> list[str]:
    """The checkpoint's own format, then the engine's formats whose weights are smaller, largest first; on
    llama.cpp, whose formats are GGUFs only, a checkpoint it cannot load (DeepSeek-V3's fp8_block) is not tried."""
    own = own_format(model, engine)  # as fit sizes it with no format asked (gguf_bf16 on llama.cpp)
    count = count_params(model)
    dtype_bytes = dtype_named(model.dtype).block_bytes
    ladder = LADDERS[_ladder_type(engine)]
    size = {f: sized_weights(count, f, dtype_bytes).total for f in {own, *ladder}}
    if isinstance(engine, LlamaCppEngine) and format_named(own).gguf is None:
        return sorted(ladder, key=lambda f: -size[f])
    smaller = sorted((f for f in size if f != own and size[f] < size[own]), key=lambda f: -size[f])
    return [own, *smaller]


def kv_ladder(engine: Engine) -> tuple[str, ...]:
    return KV_LADDERS[_ladder_type(engine)]


def best_model_answer(
    model: ModelSpec, engine: Engine, card: Card, context: int, gpus: int = 1, utilization: float | None = None
) -> ModelAnswer:
    """The first (weights, KV dtype) on the ladders that fits `context` on `gpus` of the card (vLLM taking
    `utilization` of it, where given)."""
    base = on_gpus(RunOptions(utilization).applied(Setup(model=model, engine=engine, card=card)), gpus)
    params = count_params(model).total
    limit = context_limit(base)
    tried = [(w, kv) for w in weight_ladder(model, engine) for kv in kv_ladder(engine)]
    if context > limit:  # what the card holds of it at its own limit is still told: the first format that holds it
        why = f"its limit is {format_tokens(limit)} tokens, under the {format_tokens(context)} asked"
        chosen, at_limit = tried[0], None
        for weights, kv in tried:
            try:
                if Solver(replace(base, weights=weights, kv_dtype=kv)).fits(limit):
                    chosen = weights, kv
                    break
            except InputError:
                continue
        try:
            at_limit = fit(replace(base, weights=chosen[0], kv_dtype=chosen[1]), [limit])
        except InputError:
            at_limit = None
        return ModelAnswer(
            model, params, False, *chosen, at_limit.max_context if at_limit else 0, 0.0, context, why, at_limit
        )
    last_error = ""
    for weights, kv in tried:
        setup = replace(base, weights=weights, kv_dtype=kv)
        try:
            if not Solver(setup).fits(context):
                continue
        except InputError as err:  # this engine cannot use this format or cache type for this model
            last_error = str(err)
            continue
        result = fit(setup, [context])
        return ModelAnswer(
            model, params, True, weights, kv, result.max_context, result.rows[0].max_concurrency, context, None, result
        )
    weights, kv = tried[-1]
    try:
        result = fit(replace(base, weights=weights, kv_dtype=kv), [context])
    except InputError:
        return ModelAnswer(model, params, False, weights, kv, 0, 0.0, context, last_error or "cannot run", None)
    why = f"even as {weights} with a {result.rows[0].account.kv_dtype} cache, " + _why_not(result, context)
    return ModelAnswer(
        model, params, False, weights, kv, result.max_context, result.rows[0].max_concurrency, context, why, result
    )


def model_order(answer: ModelAnswer) -> tuple:
    if answer.fits:
        return (0, -answer.params, answer.model.name)
    return (1, answer.params, answer.model.name)


def rank_models(
    models: list[ModelSpec], engine: Engine, card: Card, context: int, gpus: int = 1, utilization: float | None = None
) -> list[ModelAnswer]:
    """The models that fit `gpus` of the card at `context`, largest first, each in its best format; then the rest
    (a model the split does not suit, e.g. heads that tensor parallel cannot divide, says so)."""
    if context <= 0:
        raise InputError(f"context must be positive, got {context}")
    answers = (best_model_answer(m, engine, card, context, gpus, utilization) for m in models)
    return sorted(answers, key=model_order)


# --- speed: one request at each answer's own context -----------------------------------------------------------

# The finders' setups keep every layer on the card, so the host's figures never enter a prediction; predict needs one.
HOST = Hardware(ram_gb_s=TYPICAL_RAM_GB_S, threads=TYPICAL_THREADS)
# Layer passes one table may time (issue 17: a link costs ≤ ~2 s of server CPU). A prediction walks every layer once
# for the decode step and once per prefill span, and that work does not depend on the card, so a table of 46 cards
# repeats it 46 times: bundled models (≤ ~120 layers) are timed on every row; a 1,000-layer config (MAX_LAYERS) on
# the first few.
SPEED_LAYER_PASSES = 128 * 1024


@dataclass(frozen=True)
class AnswerSpeed:
    """core.speed's figures for one answer (batch 1, at its context), or why there are none."""

    decode_tok_s: float | None
    ttft_s: float | None
    why_none: str | None
    errors: str = ""  # the figures' held-out error, decode / prefill (ErrorBar.short)


def speed_cost(setup: Setup, context: int) -> int:
    """Layer passes `predict` walks for one request: the decode step, then each prefill span."""
    n = len(setup.model.layers)
    chunks = -(-context // prefill_chunk(setup, context))
    return n * (1 + min(chunks, prefill_spans(n)))


def answer_speeds(answers: Sequence[CardAnswer | ModelAnswer], hw: Hardware = HOST) -> list[AnswerSpeed]:
    """Decode tok/s and time to first token of one request per answer, in table order, within SPEED_LAYER_PASSES.
    `predict` reuses the per-tensor weights of a model across cards (core.speed.predict.setup_weights is cached
    per parameter count)."""
    out, spent = [], 0
    for a in answers:
        if a.result is None:
            out.append(AnswerSpeed(None, None, "cannot run"))
            continue
        if not a.fits:
            out.append(AnswerSpeed(None, None, "does not fit"))
            continue
        setup = a.result.setup
        refused = untimed(setup)  # predict refuses it, after the work
        if refused:
            out.append(AnswerSpeed(None, None, refused))
            continue
        cost = speed_cost(setup, a.context)
        if spent + cost > SPEED_LAYER_PASSES:
            layers = len(setup.model.layers)
            out.append(AnswerSpeed(None, None, f"not timed: {layers:,} layers, too many to time on every row"))
            continue
        spent += cost
        try:
            speed = predict(setup, hw, a.context, 1)
        except InputError as err:
            out.append(AnswerSpeed(None, None, str(err)))
            continue
        bars = [bar.short if bar else "not checked" for bar in (speed.decode_error, speed.prefill_error)]
        out.append(AnswerSpeed(speed.decode_tok_s, speed.ttft_s, None, " / ".join(bars)))
    return out


# --- table rows as shown: text, "—" with the reason where there is no figure ---------------------------------------


def _absent(why: str) -> str:
    return f"— ({why})"


def _max_context_cell(result: Fit | None) -> str:
    """As Fit a card shows it: "no limit" for a model with no position limit of its own (not kvscope's search cap)."""
    return _absent("cannot run") if result is None else max_context_text(result)


def _requests_cell(result: Fit | None, fits: bool) -> str:
    """As Fit a card counts them (fractional only for vLLM), at the row's own context."""
    if result is None:
        return _absent("cannot run")
    return requests_text(result, result.rows[0]) if fits else _absent("does not fit")


def _speed_cells(speed: AnswerSpeed) -> dict[str, str]:
    if speed.decode_tok_s is None or speed.ttft_s is None:
        why = _absent(speed.why_none or "no figure")
        return {"decode tok/s": why, "time to first token": why, "error (decode / prefill)": "—"}
    return {
        "decode tok/s": f"{speed.decode_tok_s:,.1f}", "time to first token": f"{speed.ttft_s:,.2f} s",
        "error (decode / prefill)": speed.errors,
    }  # fmt: skip


def split_text(result: Fit | None) -> str:
    """vLLM over several GPUs: the tensor × pipeline parallel plan the answer was sized on (fit.on_gpus), or ""."""
    if result is None or not isinstance(result.setup.engine, VllmEngine) or result.setup.gpus == 1:
        return ""
    return f"TP {result.setup.tp} × PP {result.setup.pp}"


def _with_split(rows: list[dict[str, str]], results: list[Fit | None]) -> list[dict[str, str]]:
    """The rows, each with its vLLM plan after the fit columns where any has one."""
    splits = [split_text(r) for r in results]
    if not any(splits):
        return rows
    return [{**row, "vLLM split": split or "—"} for row, split in zip(rows, splits, strict=True)]


def card_rows(answers: list[CardAnswer], speeds: list[AnswerSpeed]) -> list[dict[str, str]]:
    return _with_split(
        [
            {
                "card": a.card.name,
                "memory": format_bytes(a.card.memory_bytes),
                "fits": "yes" if a.fits else "no",
                "max context": _max_context_cell(a.result),
                "context": format_tokens(a.context),
                "requests": _requests_cell(a.result, a.fits),
                **_speed_cells(s),
                "weights": a.weights_format,
                "why not": a.why_not or "",
            }
            for a, s in zip(answers, speeds, strict=True)
        ],
        [a.result for a in answers],
    )


def shown_weights(answer: ModelAnswer) -> str:
    """The format as fit and cards name it: a 16-bit checkpoint on llama.cpp is its GGUF (gguf_bf16)."""
    return answer.result.weights_format if answer.result else answer.weights_format


def model_rows(answers: list[ModelAnswer], speeds: list[AnswerSpeed]) -> list[dict[str, str]]:
    return _with_split(
        [
            {
                "model": a.model.name,
                "parameters": f"{a.params / 1e9:,.1f}B",
                "fits": "yes" if a.fits else "no",
                "best weights": shown_weights(a),
                "KV dtype": a.result.rows[0].account.kv_dtype if a.result else a.kv_dtype,
                "max context": _max_context_cell(a.result),
                "context": format_tokens(a.context),
                "requests": _requests_cell(a.result, a.fits),
                **_speed_cells(s),
                "why not": a.why_not or "",
            }
            for a, s in zip(answers, speeds, strict=True)
        ],
        [a.result for a in answers],
    )


# --- records: one dict per answer, for the command line's JSON and the pages' tables ------------------------------


def seq_bound(result: Fit | None) -> dict:
    """{"max_num_seqs": n} where vLLM's scheduler runs fewer requests at once than the cache holds (as fit's JSON)."""
    seqs = result.rows[0].max_num_seqs if result else 0
    return {"max_num_seqs": seqs} if seqs else {}


def card_record(answer: CardAnswer) -> dict:
    return {
        "card": answer.card.name,
        "memory_bytes": answer.card.memory_bytes,
        "unified_memory": answer.card.unified_memory,
        "fits": answer.fits,
        "context": answer.context,
        "max_context": answer.max_context,
        "requests": answer.requests if answer.requests != float("inf") else None,
        **seq_bound(answer.result),
        "weights": answer.weights_format,
        "weights_bytes": answer.weights_bytes,
        "usable_bytes": answer.usable_bytes,
        "split": split_text(answer.result),
        "why_not": answer.why_not,
    }


def model_record(answer: ModelAnswer) -> dict:
    return {
        "model": answer.model.name,
        "params": answer.params,
        "fits": answer.fits,
        "weights": shown_weights(answer),
        "kv_dtype": answer.result.rows[0].account.kv_dtype if answer.result else answer.kv_dtype,
        "context": answer.context,
        "max_context": answer.max_context,
        "requests": answer.requests if answer.requests != float("inf") else None,
        **seq_bound(answer.result),
        "weights_bytes": answer.result.weights_bytes if answer.result else None,
        "split": split_text(answer.result),
        "why_not": answer.why_not,
    }
