"""How close each engine gets to the hardware's roofline: fitted or assumed parameters, kept as data with their
provenance (efficiencies.json beside this file) and shown wherever a speed is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.errors import InputError

DATA = Path(__file__).resolve().parent / "efficiencies.json"
DEVICES = ("gpu", "cpu")


@dataclass(frozen=True)
class Efficiency:
    """One engine on one kind of device.

    On a GPU the compute figures are fractions of the card's dense peak; on a CPU there is no datasheet peak to take
    a fraction of, so they are effective GFLOP/s per thread. `bandwidth` is a fraction of the memory bandwidth (the
    card's, or the RAM copy bandwidth measured on the machine; a fitted CPU figure may exceed 1, since several
    threads streaming reads outrun one thread's numpy copy)."""

    engine: str
    device: str
    bandwidth: float
    decode_compute: float  # weights: matrix × vector (one token per sequence)
    decode_attention: float  # one query's q·k and p·v over the cached keys (vector work, far below peak)
    prefill_compute: float  # weights: matrix × matrix (a chunk of tokens)
    prefill_attention: float  # a chunk's queries against the keys (matrix work)
    overhead_step_s: float  # per forward pass: scheduling, sampling, graph build, launches
    overhead_layer_s: float  # per decoder layer and pass (framework dispatch, e.g. eager PyTorch)
    status: str  # "fitted" | "assumed"
    provenance: str
    fitted_on: str = ""
    checked_on: str = ""

    @property
    def compute_unit(self) -> str:
        return "GFLOP/s per thread" if self.device == "cpu" else "× card dense peak"

    def overhead_s(self, layers: int) -> float:
        return self.overhead_step_s + self.overhead_layer_s * layers


@lru_cache(maxsize=1)
def efficiencies() -> dict[tuple[str, str], Efficiency]:
    rows = json.loads(DATA.read_text(encoding="utf-8"))["entries"]
    return {(r["engine"], r["device"]): Efficiency(**r) for r in rows}


def efficiency_for(engine: str, device: str) -> Efficiency:
    if device not in DEVICES:
        raise InputError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    try:
        return efficiencies()[(engine, device)]
    except KeyError:
        raise InputError(f"no speed parameters for {engine} on {device}") from None
