"""Hybrid vs dense: the same questions asked of several models over context length and card size."""

from __future__ import annotations

from dataclasses import dataclass, replace

from core.errors import InputError
from core.fit import Setup, Solver
from core.gpus import Card
from core.model import ModelSpec

CARD_SIZES_GIB = (8, 12, 16, 24, 32, 48, 80, 96, 141)


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
    kv_bytes_per_token: int
    fixed_bytes: int


def series(setup: Setup, contexts: list[int]) -> Series:
    solver = Solver(setup)
    usable = [c for c in contexts if c <= solver.limit]
    return Series(
        name=setup.model.name,
        contexts=tuple(usable),
        cache_bytes=tuple(solver.cache(c) for c in usable),
        concurrency=tuple(solver.concurrency(c) for c in usable),
        kv_bytes_per_token=setup.engine.kv_bytes_per_token(setup.model, setup.kv_dtype),
        fixed_bytes=setup.engine.fixed_bytes_per_sequence(setup.model, setup.kv_dtype),
    )


def ratio(base: Series, other: Series) -> tuple[list[int], list[float]]:
    """other's cache ÷ base's cache at the contexts both reach."""
    pairs = [(c, o / b) for c, b, o in zip(base.contexts, base.cache_bytes, other.cache_bytes, strict=False) if b]
    return [c for c, _ in pairs], [r for _, r in pairs]


def asymptote(base: Series, other: Series) -> float | None:
    """Where the ratio heads as context grows: the per-token rates' ratio (fixed state fades)."""
    return other.kv_bytes_per_token / base.kv_bytes_per_token if base.kv_bytes_per_token else None


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
