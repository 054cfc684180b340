"""Plain records of a fit for tables, charts, downloads and the verdict sentence."""

from __future__ import annotations

from dataclasses import dataclass

from core.fit import Fit, Row
from core.units import format_bytes, format_tokens


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
        for r in fit.rows
    ]


def breakdown_records(fit: Fit) -> list[dict]:
    """Per context: weights, growing (attention) cache, fixed state and overhead, per GPU."""
    out = []
    for r in fit.rows:
        split = fit.setup.pp
        out.append(
            {
                "label": format_tokens(r.context),
                "weights": r.weights_bytes,
                "attention cache": -(-r.account.token_bytes // split),
                "fixed state": -(-r.account.fixed_bytes // split),
                "overhead": r.overhead_bytes,
                "usable": fit.usable_bytes,
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
    what = f"{s.model.name} ({fit.weights_format} weights, {s.engine.name}, KV {row.account.kv_dtype}) on {where}"
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
            f"{what}: a {format_tokens(row.context)}-token context needs "
            f"{format_bytes(row.total_bytes)}, more than the {format_bytes(fit.usable_bytes)} usable; "
            f"{longest}.",
        )
    n = row.max_concurrency
    requests = "an unlimited number of" if n == float("inf") else f"{n:,.2f}" if fit.vllm else f"{int(n):,}"
    return Verdict(
        True,
        "Fits",
        f"{what}: a {format_tokens(row.context)}-token context fits with {format_bytes(row.headroom_bytes)} to "
        f"spare; one sequence can reach {format_tokens(fit.max_context)} tokens; {requests} requests of "
        f"{format_tokens(row.context)} can run at once.",
    )
