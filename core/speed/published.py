"""Published speed figures (measurements/speed/published_speed.jsonl) to overlay on kvscope's curves."""

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
