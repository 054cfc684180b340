"""'How is this computed?': each number of a fit, as its formula with the model's own numbers plugged in.

Every `a × b … = c` printed here evaluates to the number beside it (tests/test_app_formulas.py parses and checks
them), so each formula is built from the same quantities core used, not from a simplified story of them."""

from __future__ import annotations

from core.dtypes import dtype_named
from core.engines.base import CacheAccount, KindLine, sized_weights
from core.engines.llamacpp import LlamaCppEngine
from core.engines.vllm_engine import VllmEngine
from core.engines.vllm_pipeline import fullest_stage_fraction, stage_bytes_per_block
from core.fit import Fit, GpuShare, Row, Setup, Solver, cache_in_ram, fit, layer_bytes
from core.memory.llamacpp_compute import PIPELINE_ITEM
from core.memory.overhead import PER_SEQUENCE
from core.model.params import count_params
from core.units import floor_places, format_bytes, format_tokens


def _copies(n: int, batch: int) -> str:
    """The multiplier of a line's total: its sequences, or the engine's slots where they are more (llama.cpp)."""
    return "" if n == 1 else f" × {n} {'sequences' if n == batch else 'slots'}"


def _plain_line(line: KindLine, batch: int) -> list[str]:
    parts = []
    if line.token_bytes_total:
        held = f" — {line.tokens_held:,} cells: {line.held_note}" if line.held_note else ""
        parts.append(
            f"{line.count} × {line.bytes_per_token:,} B/token × {line.tokens_held:,} tokens held"
            f"{_copies(line.token_copies, batch)} = {format_bytes(line.token_bytes_total)}{held}"
        )
    if line.fixed_bytes_total:
        parts.append(
            f"{line.count} × {line.fixed_bytes:,} B state per sequence{_copies(line.fixed_copies, batch)} = "
            f"{format_bytes(line.fixed_bytes_total)}"
        )
    return parts


def _vllm_lines(solver: Solver, account: CacheAccount) -> dict[str, tuple[str, str]]:
    """vLLM allocates whole blocks in groups of equal layer slots (padded) and keeps 1-3 blocks of state per
    request: per label, slots × page × blocks, as its block pool draws them."""
    engine, model = solver.engine, solver.model
    plan = engine.plan(model, solver.setup.kv_dtype)
    out = {}
    for label in {g.page.label for g in plan.groups}:
        groups = [g for g in plan.groups if g.page.label == label]
        page = groups[0].page
        slots = len(groups) * plan.group_size
        layers = sum(g.layers for g in groups)
        blocks = engine.blocks_for(plan, groups[0], account.context, max(account.context, model.max_context or 0))
        seqs = f" × {account.batch} sequences" if account.batch > 1 else ""
        if page.kind == "state":
            formula = f"{slots} layer slots × {plan.page_bytes[page]:,} B page × {blocks} blocks per sequence{seqs}"
        else:
            per_token = plan.page_bytes[page] // plan.block_size
            formula = f"{slots} layer slots × {per_token:,} B/token × {blocks * plan.block_size:,} tokens held{seqs}"
        padding = f" — {layers} layers in {len(groups)} groups of {plan.group_size}" if slots != layers else ""
        out[label] = formula, padding
    return out


def cache_lines(account: CacheAccount, solver: Solver | None = None) -> list[str]:
    vllm = _vllm_lines(solver, account) if solver and isinstance(solver.engine, VllmEngine) else {}
    lines = []
    for line in account.lines:
        if line.label in vllm:  # the formula from vLLM's layout, the total from core's account
            formula, padding = vllm[line.label]
            parts = [f"{formula} = {format_bytes(line.total)}{padding}"]
        else:
            parts = _plain_line(line, account.batch)
        lines.append(f"**{line.label}**: " + ("; ".join(parts) or "nothing cached"))
    kinds = "KV " + account.kv_dtype if any(line.bytes_per_token for line in account.lines) else "no KV"
    terms = [format_bytes(line.total) for line in account.lines if line.total]
    sum_text = " + ".join(terms) + " = " if len(terms) > 1 else ""
    lines.append(f"**cache total** ({account.engine}, {kinds}): {sum_text}{format_bytes(account.total)}")
    return lines


def _concurrency_line(fit: Fit, row: Row, solver: Solver) -> str:
    usable, weights, overhead = fit.usable_bytes, row.weights_bytes, row.overhead_bytes
    budget = solver.budget(row.context)
    # llama.cpp gives up pipeline parallelism's copies where more sequences need their room (Solver.budget)
    copies = sum(item.bytes for item in row.overhead if item.label == PIPELINE_ITEM)
    spent = f"{overhead - copies:,} B overhead without the pipeline copies" if copies else f"{overhead:,} B overhead"
    left = f"{usable:,} B usable − {weights:,} B weights − {spent} = {budget:,} B for cache"
    kept = max(0, budget)
    if isinstance(solver.engine, VllmEngine):
        kv = solver.setup.kv_dtype
        per_block = max(stage_bytes_per_block(solver.engine, solver.setup.model, kv))
        cap = solver.vllm_capacity(row.context)
        stages = " on the fullest pipeline stage" if solver.setup.pp > 1 else ""
        return (
            f"**Concurrency** (vLLM): {left}; ⌊{kept:,} B ÷ {per_block:,} B per block{stages}⌋ = "
            f"{cap.num_blocks:,} blocks; {cap.num_blocks:,} blocks ÷ {cap.blocks_per_request:,} blocks per request "
            f"= {cap.max_concurrency:.2f} requests of {format_tokens(row.context)}"
        )
    if cache_in_ram(fit, row):
        return f"**Concurrency**: {left}; no cache on the GPU: system RAM bounds the requests (not sized here)"
    grows = solver.batch_overhead(row.context)
    if grows:  # transformers: the budget holds one sequence's prefill overhead, each more sequence its own
        kinds = ", ".join(item.label for item in row.overhead if item.label in PER_SEQUENCE)
        return (
            f"**Concurrency** (transformers prefills a batch's prompts together, so each sequence brings its own "
            f"{kinds}): {left}; ⌊({kept:,} B + {grows:,} B) ÷ ({row.cache_bytes:,} B + {grows:,} B per sequence)⌋ "
            f"= {row.max_concurrency:,.0f}"
        )
    if not row.cache_bytes:
        return f"**Concurrency**: {left}; nothing grows per sequence, so any number of requests fits"
    share = solver.fullest(row.context)
    if share is not None and solver.unified:
        return _shared_line(row, solver, share)
    return f"**Concurrency**: {left}; ⌊{kept:,} B ÷ {row.cache_bytes:,} B per sequence⌋ = {row.max_concurrency:,.0f}"


def _shared_line(row: Row, solver: Solver, share: GpuShare) -> str:
    """llama.cpp's unified cache: n sequences share pad(n × context) cells, so the count is the most whose cache
    and overhead (masks over every cell) fit, shown for it and for one more; or the slots, where they bound it."""
    assert isinstance(solver.engine, LlamaCppEngine)
    n, slots = int(row.max_concurrency), solver.engine.options.n_seq_max

    def left(k: int) -> str:
        overhead, cache = solver.need(share, row.context, k)
        total = share.weights + overhead + cache
        return (
            f"{k} sequence{'s' if k > 1 else ''}: {share.weights:,} B weights + {overhead:,} B overhead + "
            f"{cache:,} B cache = {total:,} B, {'within' if total <= solver.usable else 'over'} the "
            f"{solver.usable:,} B usable"
        )

    head = (
        "**Concurrency** (llama.cpp's unified cache: the sequences share one stream of cells, each slot with its own "
        "windows and state, and the attention masks span every cell)"
    )
    if n >= 1 and n == slots:
        return f"{head}: {left(n)}; at most {slots} run at once, the front end's slots (-np)"
    shown = [left(k) for k in (n, n + 1) if k >= 1]
    return f"{head}: " + "; ".join(shown) + f" — {n} fit"


def row_lines(fit: Fit, row: Row) -> list[str]:
    setup = fit.setup
    solver = Solver(setup)
    per_gpu = f" per GPU (÷ {setup.gpus})" if setup.gpus > 1 else ""
    if solver.stage_weights:  # vLLM: sharded as it shards them, not evenly
        per_gpu = (
            " on the heaviest GPU (vLLM keeps norms, routers and MLA's down-projections whole on each of its "
            f"{setup.tp} tensor-parallel ranks, the embedding on the first stage and the head on the last)"
        )
    out = [f"### At {format_tokens(row.context)} tokens", "**Cache**"]
    if row.gpu:  # llama.cpp: each GPU holds its own layers; the figures are the fullest one's
        per_gpu = f" on {row.gpu}"
        decides = "the GPU that decides at this context, where the fewest sequences fit (llama.cpp's layer split)"
        out.append(f"- on {row.gpu}, {decides}")
    if cache_in_ram(fit, row):
        ngl = setup.gpu_layers
        out.append(f"- none on the GPU: every decoder layer, with its cache, is in system RAM (-ngl {ngl})")
    else:
        out += [f"- {line}" for line in cache_lines(row.account, solver)]
    if setup.pp > 1 and not row.gpu:
        total = row.account.total
        if isinstance(solver.engine, VllmEngine):
            stage, whole = fullest_stage_fraction(solver.engine, solver.model, setup.kv_dtype)
            out.append(
                f"- per GPU, the fullest of {setup.pp} pipeline stages: {total:,} B × {stage:,} ÷ {whole:,} "
                f"= {format_bytes(row.cache_bytes)}"
            )
        else:
            out.append(
                f"- per GPU, {setup.pp} pipeline stages: {total:,} B ÷ {setup.pp} = {format_bytes(row.cache_bytes)}"
            )
    out.append(f"**Weights** ({fit.weights_format}){per_gpu}: {format_bytes(row.weights_bytes)}")
    out += weights_lines(row, solver)
    out.append("**Overhead**")
    out += [f"- {item.label}: {item.formula} = {format_bytes(item.bytes)}{item.basis_note}" for item in row.overhead]
    out.append(
        f"**Total**: weights {format_bytes(row.weights_bytes)} + overhead {format_bytes(row.overhead_bytes)} + "
        f"cache {format_bytes(row.cache_bytes)} = {format_bytes(row.total_bytes)}; "
        f"usable {format_bytes(fit.usable_bytes)} − total {format_bytes(row.total_bytes)} = "
        f"{format_bytes(row.headroom_bytes)} headroom"
        + (f"; {row.tightest} has less left: {format_bytes(row.tightest_headroom_bytes)}" if row.tightest else "")
    )
    out.append(_concurrency_line(fit, row, solver))
    return out


# WeightBytes' categories as the weights line names them
CATEGORIES = (("embedding", "token embedding"), ("lm_head", "output head"), ("linear", "linear layers"),
              ("experts", "routed experts"), ("router", "routers"), ("other", "norms and the rest"))  # fmt: skip


def weights_lines(row: Row, solver: Solver) -> list[str]:
    """The weights figure from the model's tensors, each sized in the format as the engine loads it (a weights
    file's are its own): the whole model by category, then the part on the row's GPU."""
    setup = solver.setup
    if setup.weights_file is not None:
        return [f"- the file's own tensors: {setup.weights_file.total_bytes:,} B in all"]
    count, dtype_bytes = count_params(setup.model), dtype_named(setup.model.dtype).block_bytes
    whole = sized_weights(count, solver.format, dtype_bytes)
    terms = " + ".join(f"{label} {getattr(whole, key):,} B" for key, label in CATEGORIES if getattr(whole, key))
    out = [f"- the whole model, each tensor in {solver.format}: {terms} = {whole.total:,} B"]
    if solver.relaid:
        out.append(
            f"- vLLM re-lays the MXFP4 experts for its kernel: {whole.total:,} B + {solver.relaid:,} B = "
            f"{solver.weights_total:,} B"
        )
    share = solver.fullest(row.context)
    if share is not None:  # llama.cpp: the decoder layers -ngl puts on this GPU and, on the last, the output layer
        dense, routed, output = layer_bytes(count, solver.format, dtype_bytes)
        part = share.where
        layers = sum(dense[i] + (0 if i in part.cpu_experts else routed[i]) for i in part.layers if i < len(dense))
        kept = f" + output layer {output:,} B" if part.output else ""
        tied = (
            ", the output layer holding the token embedding again (tied)" if part.output and not whole.lm_head else ""
        )
        shares = solver.shares
        ram = ["the token embedding"] + (["the experts --n-cpu-moe names"] if part.cpu_experts else [])
        ram += ["the layers -ngl leaves"] if sum(len(sh.where.layers) for sh in shares) < len(dense) else []
        ram += [] if any(sh.where.output for sh in shares) else ["the output layer"]
        others = "; the other GPUs hold the other layers" if len(shares) > 1 else ""
        out.append(
            f"- on the GPU: decoder layers {layers:,} B{kept} = {share.weights:,} B{tied}{others}; "
            + (", ".join(ram[:-1]) + " and " + ram[-1] + " stay" if len(ram) > 1 else f"{ram[0]} stays")
            + " in system RAM"
        )
    elif solver.stage_weights:
        ranks = ", ".join(format_bytes(w) for w in solver.stage_weights)
        out.append(f"- per GPU, as vLLM shards them: the heaviest of its pipeline stages' ranks ({ranks})")
    elif setup.gpus > 1:
        out.append(f"- per GPU: {solver.weights_total:,} B ÷ {setup.gpus} GPUs = {solver.weights:,} B, rounded up")
    return out


def usable_line(fit: Fit) -> str:
    card = fit.setup.card
    util = fit.setup.gpu_memory_utilization if fit.vllm is not None else 1.0
    return (
        f"**Usable memory per GPU** ({card.name}, {card.basis}): {card.memory_bytes:,} B"
        + (f" × {util} gpu_memory_utilization" if util != 1.0 else "")
        + f" = {format_bytes(fit.usable_bytes)}"
    )


def max_context_line(fit: Fit) -> str:
    """The longest single-sequence context: the rows of one sequence on either side of it, as the solver's bisection
    left them (a row fits while at least one request does: the Concurrency line's arithmetic)."""
    solver = Solver(fit.setup)
    head = "**Longest context, one sequence** (the longest n at which one request fits, bisected over n)"
    n = fit.max_context
    if n >= fit.context_limit:
        return (
            f"{head}: {n:,} tokens fit, the longest searched: the model's own limit (or --max-model-len), or "
            "kvscope's cap on a model without one"
        )

    def at(k: int) -> str:
        r = solver.row(k)
        return (
            f"at {k:,} tokens, total {r.total_bytes:,} B of {fit.usable_bytes:,} B usable, "
            f"{floor_places(r.max_concurrency):,.2f} requests: {'fits' if r.fits else 'does not fit'}"
        )

    return f"{head}: " + "; ".join(at(k) for k in (n, n + 1) if k >= 1) + f" — {n:,}"


def worked_point(
    drawn: dict[str, tuple[int, ...]], wanted: tuple[str, int] | None
) -> tuple[str, int | None, str | None]:
    """The point of the hybrid page's curves to work out: `wanted` (a model's name and a context, from the link or
    the boxes) where its curve draws it. A model not drawn gives way to the first; a context its curve does not draw
    to the nearest one it draws below it (the first if none is). Returns the model, the context (None when its curve
    draws none) and a note saying what gave way, or None. `drawn`: each model's contexts, in the page's order."""
    first = next(iter(drawn))
    if wanted is None:
        return first, (drawn[first] or (None,))[0], None
    name, context = wanted
    notes = []
    if name not in drawn:
        notes.append(f"The worked point names {name}, which this page does not draw; it shows {first}'s.")
        name = first
    contexts = drawn[name]
    if not contexts:
        return name, None, " ".join(notes) or None
    if context not in contexts:
        below = [c for c in contexts if c <= context]
        shown = below[-1] if below else contexts[0]
        where = (
            f"past its last, {format_tokens(contexts[-1])}"
            if context > contexts[-1]
            else f"before its first, {format_tokens(contexts[0])}"
            if not below
            else "between two of its points"
        )
        notes.append(
            f"{name}'s curve has no point at {format_tokens(context)} tokens ({where}): the point at "
            f"{format_tokens(shown)} is worked out."
        )
        context = shown
    return name, context, " ".join(notes) or None


def point_lines(setup: Setup, context: int) -> list[str]:
    """One point of a requests-at-once curve (the hybrid page's: Solver.concurrency at `context`), worked out as Fit a
    card works a row: the usable memory, one request's cache (its growing part and its fixed state), the weights and
    overhead, the budget left for cache and its division, then the engine's own cap on requests at once."""
    result = fit(setup, [context])
    row = result.rows[0]
    account = row.account
    growing = sum(line.token_bytes_total for line in account.lines)
    fixed = sum(line.fixed_bytes_total for line in account.lines)
    per_gpu = "" if row.cache_bytes == account.total else f", {format_bytes(row.cache_bytes)} of it per GPU"
    return [
        f"### {setup.model.name}: requests of {format_tokens(context)} tokens at once on {setup.card.name}",
        usable_line(result),
        f"**One request's cache**: growing part {growing:,} B + fixed state {fixed:,} B = {account.total:,} B"
        f"{per_gpu} (term by term below)",
        *row_lines(result, row)[1:],
        cap_line(result, row),
    ]


def cap_line(fit: Fit, row: Row) -> str:
    """The engine's own bound on the requests it runs at once, beside the memory's figure (row.max_concurrency, what
    the curve draws)."""
    engine = fit.engine or fit.setup.engine
    n = row.max_concurrency
    if n == float("inf"):
        return "**Engine's cap**: none needed: no request's cache grows on the GPU; the curve draws it at its top"
    if isinstance(engine, VllmEngine):
        cap = engine.max_seqs()
        verdict = f"the cache holds more, so {cap:,} run" if row.max_num_seqs else "the cache decides"
        return (
            f"**Engine's cap** (vLLM): its scheduler runs at most --max-num-seqs {cap:,} requests at once "
            f"(`vllm serve`'s default for the card, or as set); {verdict}. The curve draws the cache's "
            f"{floor_places(n):,.2f}"
        )
    if isinstance(engine, LlamaCppEngine):
        slots = engine.options.n_seq_max
        if row.slots:
            return (
                f"**Engine's cap** (llama.cpp): its unified cache is made for {row.slots} slots (-np), and memory "
                f"holds all of them (-c {row.n_ctx:,}): the curve stops at {row.slots}"
            )
        if row.front_end_runs:
            return (
                f"**Engine's cap** (llama.cpp): memory holds {int(n):,} {engine.runs_phrase(int(n))}; the curve "
                "draws what the memory holds"
            )
        if slots:
            return (
                f"**Engine's cap** (llama.cpp): at most its {slots} slots (-np) run at once; memory holds {int(n):,}, "
                "which the curve draws"
            )
        return f"**Engine's cap** (llama.cpp): none besides the memory's {int(n):,}"
    return f"**Engine's cap** ({engine.name}): none; generate() batches as many as it is given, so memory decides"
