"""Hybrid vs dense: the same questions asked of several models over context length and card size."""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.errors import InputError
from core.fit import Setup, Solver, context_limit
from core.memory.gpus import Card
from core.model.spec import ModelSpec
from core.units import format_tokens

CARD_SIZES_GIB = (8, 12, 16, 24, 32, 48, 80, 96, 141)
FAR = 1 << 22  # a context past every window: the per-token rate there is what the cache grows by for good
UNLIMITED_SHOWN = 1 << 20  # how far curves run when no model drawn has a position limit (state-space models)


def layout(model: ModelSpec) -> str:
    """The cache layout in words. "Dense" would be ambiguous (dense vs MoE), so the layers are named."""
    parts = [p for layer in model.layers for p in layer.parts()]
    full = any(p.grows and p.token_cap is None for p in parts)
    capped = any(p.grows and p.token_cap is not None for p in parts)
    state = any(p.state_tensors() for p in parts)
    if state:
        return "hybrid: state + attention" if full or capped else "state only, no attention"
    if capped:
        return "sliding-window + full attention" if full else "all sliding-window attention"
    return "all full attention" if full else "no cache"


def context_grid(limit: int, start: int = 1024) -> list[int]:
    """Powers of two from 1K to the limit, with the limit itself last."""
    grid, n = [], start
    while n < limit:
        grid.append(n)
        n *= 2
    return [*grid, limit]


@dataclass(frozen=True)
class Series:
    name: str
    contexts: tuple[int, ...]
    cache_bytes: tuple[int, ...]
    concurrency: tuple[float, ...]
    fixed_bytes: int  # one request's fixed state as the engine allocates it (its pages, llama-server's 4 slots)
    far_bytes_per_token: float  # past every window, as the engine holds it: what the ratio heads toward
    layout: str
    limit: int  # the model's own longest context (or the search cap for models without one)
    unlimited: bool = False  # no position limit of its own: `limit` is kvscope's search cap, not the model's
    # cache(n) term by term, as the engine holds it: bytes per token of the layers that keep every token, and per
    # windowed group its bytes per token and the most tokens it holds (a window, llama-server's 4 and a micro-batch)
    full_bytes_per_token: int = 0
    windows: tuple[tuple[int, int], ...] = ()

    def formula(self) -> str:
        """cache(n) in this series' own terms (n rounded up to the engine's cells or blocks)."""
        terms = [f"{self.full_bytes_per_token:,} B/token × n"] if self.full_bytes_per_token else []
        terms += [f"{rate:,} B/token × min(n, {held:,})" for rate, held in self.windows]
        terms += [f"{self.fixed_bytes:,} B of fixed state"] if self.fixed_bytes else []
        return " + ".join(terms) or "0"

    @property
    def limit_text(self) -> str:
        return "no limit" if self.unlimited else format_tokens(self.limit)


def series(setup: Setup, contexts: list[int]) -> Series:
    solver = Solver(setup)
    usable = [c for c in contexts if c <= solver.limit]
    far = (solver.cache(2 * FAR) - solver.cache(FAR)) / FAR if solver.model.layers else 0.0
    # past every window, a line holding fewer tokens than the context is a windowed one (its cap as held)
    lines = solver.account(FAR).lines if solver.model.layers else ()
    rate = [line.count * line.bytes_per_token * line.token_copies for line in lines]
    return Series(
        name=setup.model.name,
        contexts=tuple(usable),
        cache_bytes=tuple(solver.cache(c) for c in usable),
        concurrency=tuple(solver.concurrency(c) for c in usable),
        fixed_bytes=sum(line.fixed_bytes_total for line in lines),
        far_bytes_per_token=far,
        layout=layout(setup.model),
        limit=context_limit(setup),
        unlimited=not has_limit(setup),
        full_bytes_per_token=sum(r for r, line in zip(rate, lines, strict=True) if r and line.tokens_held >= FAR),
        windows=tuple(
            (r, line.tokens_held) for r, line in zip(rate, lines, strict=True) if r and line.tokens_held < FAR
        ),
    )


def has_limit(setup: Setup) -> bool:
    """The model (or the engine's max_model_len) bounds the context; a pure state-space model does not."""
    return setup.model.max_context is not None or setup.max_model_len is not None


def shown_limit(setups: list[Setup]) -> int:
    """How far curves comparing these setups run: the longest own limit among them. Models without one are drawn
    that far too; only when none has a limit does a fixed span stand in (never the search cap, 16M tokens)."""
    return max((context_limit(s) for s in setups if has_limit(s)), default=UNLIMITED_SHOWN)


def ratio(base: Series, other: Series) -> tuple[list[int], list[float]]:
    """other's cache ÷ base's cache at the contexts both reach."""
    pairs = [(c, o / b) for c, b, o in zip(base.contexts, base.cache_bytes, other.cache_bytes, strict=False) if b]
    return [c for c, _ in pairs], [r for _, r in pairs]


def asymptote(base: Series, other: Series) -> float | None:
    """Where the ratio heads as context grows: the ratio of the per-token rates once every window is full and
    fixed state has faded. None when the base's cache stops growing (the ratio then grows without bound)."""
    return other.far_bytes_per_token / base.far_bytes_per_token if base.far_bytes_per_token else None


def max_context_by_card(setup: Setup, sizes_gib: tuple[float, ...] = CARD_SIZES_GIB) -> list[int]:
    out = []
    for gib in sizes_gib:
        try:
            out.append(Solver(replace(setup, card=Card.custom(gib))).max_context())
        except InputError:
            out.append(0)
    return out


def with_model(setup: Setup, model: ModelSpec) -> Setup:
    return replace(setup, model=model)
