"""How fast: decode, prefill and time to first token for a Setup (core.fit), per device and engine.

A roofline with engine efficiencies kept as data (efficiencies.json); see predict.py for the formula, work.py for
the bytes and FLOPs it is applied to, ram.py for the host RAM bandwidth probe. No torch, no numpy at import.
"""

from core.speed.efficiency import Efficiency, efficiencies, efficiency_for
from core.speed.predict import DevicePart, Hardware, Speed, Timing, placement, predict, setup_weights, untimed
from core.speed.work import LayerWork, PassWork, Weights, experts_touched

__all__ = [
    "DevicePart",
    "Efficiency",
    "Hardware",
    "LayerWork",
    "PassWork",
    "Speed",
    "Timing",
    "Weights",
    "efficiencies",
    "efficiency_for",
    "experts_touched",
    "placement",
    "predict",
    "setup_weights",
    "untimed",
]
