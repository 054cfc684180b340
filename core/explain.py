"""'How is this computed?': each number of a fit, as its formula with the model's own numbers plugged in."""

from __future__ import annotations

from core.engines.base import CacheAccount
from core.fit import Fit, Row
from core.units import format_bytes, format_tokens


def cache_lines(account: CacheAccount) -> list[str]:
    lines = []
    for line in account.lines:
        parts = []
        if line.token_bytes_total:
            parts.append(
                f"{line.count} × {line.bytes_per_token:,} B/token × {line.tokens_held:,} tokens held"
                + (f" × {account.batch} sequences" if account.batch > 1 else "")
                + f" = {format_bytes(line.token_bytes_total)}"
            )
        if line.fixed_bytes_total:
            parts.append(
                f"{line.count} × {line.fixed_bytes:,} B state per sequence = {format_bytes(line.fixed_bytes_total)}"
            )
        if not parts:
            parts.append("nothing cached")
        lines.append(f"**{line.label}**: " + "; ".join(parts))
    lines.append(f"**cache total** ({account.engine}, KV {account.kv_dtype}): {format_bytes(account.total)}")
    return lines


def row_lines(fit: Fit, row: Row) -> list[str]:
    setup = fit.setup
    per_gpu = f" per GPU (÷ {setup.gpus})" if setup.gpus > 1 else ""
    out = [f"### At {format_tokens(row.context)} tokens", "**Cache**"]
    out += [f"- {line}" for line in cache_lines(row.account)]
    if setup.pp > 1:
        out.append(f"- split over {setup.pp} pipeline stages → {format_bytes(row.cache_bytes)} per GPU")
    out.append(f"**Weights** ({fit.weights_format}){per_gpu}: {format_bytes(row.weights_bytes)}")
    out.append("**Overhead**")
    out += [f"- {item.label}: {item.formula} = {format_bytes(item.bytes)}" for item in row.overhead]
    out.append(
        f"**Total** = weights {format_bytes(row.weights_bytes)} + overhead {format_bytes(row.overhead_bytes)} + "
        f"cache {format_bytes(row.cache_bytes)} = {format_bytes(row.total_bytes)} of {format_bytes(fit.usable_bytes)}"
        f" usable → headroom {format_bytes(row.headroom_bytes)}"
    )
    if fit.vllm is not None:
        out.append(
            "**Concurrency** (vLLM): KV budget ÷ block bytes = blocks; blocks ÷ blocks per request = "
            f"{row.max_concurrency:.2f} requests of {format_tokens(row.context)}"
        )
    else:
        out.append(
            f"**Concurrency**: ⌊(usable − weights − overhead) ÷ cache per sequence⌋ = {row.max_concurrency:,.0f}"
        )
    return out


def usable_line(fit: Fit) -> str:
    card = fit.setup.card
    util = fit.setup.gpu_memory_utilization if fit.vllm is not None else 1.0
    return (
        f"**Usable memory per GPU**: {card.name}: {format_bytes(card.memory_bytes)} ({card.basis})"
        + (f" × gpu_memory_utilization {util}" if util != 1.0 else "")
        + f" = {format_bytes(fit.usable_bytes)}"
    )
