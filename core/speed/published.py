"""Published speed figures (measurements/speed/published_speed.jsonl): overlaid on kvscope's curves, and the error
bar of engines whose efficiencies are assumed rather than fitted (vLLM, transformers)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

PATH = Path(__file__).resolve().parents[2] / "measurements" / "speed" / "published_speed.jsonl"


@lru_cache(maxsize=1)
def published() -> tuple[dict, ...]:
    try:
        text = PATH.read_text(encoding="utf-8")
    except OSError:
        return ()
    return tuple(json.loads(line) for line in text.splitlines() if line.strip())


def points(model: str, card: str, engine: str, metric: str) -> list[dict]:
    """Figures for this model on this card and engine: context, value, flag and source."""
    return [
        r
        for r in published()
        if r["model"] == model and r["setup"]["gpu"] == card and r["setup"]["engine"] == engine
        and r["metric"] == metric
    ]  # fmt: skip


def error_figures(engine: str, metric: str) -> list[dict]:
    """The engine's figures of this metric that its error bar is stated on: every one but those marked
    `"in_error_bar": false` (a figure its own source contradicts, or one timed on a kernel kvscope does not model;
    the line's flag and caveat say which), each with kvscope's stored prediction (tests/bench/published_speed.py)."""
    return [
        r for r in published()
        if r["setup"]["engine"] == engine and r["metric"] == metric and r.get("in_error_bar", True) and "kvscope" in r
    ]  # fmt: skip
