"""Predictions for the CPU speed runs, and the fit of an engine's CPU efficiencies to a subset of them.

The fit minimises the absolute log error of decode and prefill tok/s together, by coordinate descent on the
logarithms of the parameters (no scipy here); it is small and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from functools import cache
from typing import Any

from core.engines import configured
from core.fit import Setup
from core.memory.gpus import Card
from core.model.loading import load_model
from core.speed import Efficiency, Hardware, efficiency_for, predict, setup_weights
from core.speed.calibration import Calibration
from core.speed.cli import calibrated_host
from tests.bench.speed_runs import PROBE_DTYPE, config_path

# llama.cpp: the roofline's own terms and a per-pass overhead. transformers (eager, DynamicCache): its decode is
# dispatch-bound, so a per-layer overhead; fitting on one depth cannot tell per-pass from per-layer, so only the
# latter is fitted.
FIT_KEYS = {
    "llama.cpp": (
        "bandwidth", "decode_compute", "decode_attention", "prefill_compute", "prefill_attention", "overhead_step_s",
    ),
    "transformers": ("bandwidth", "decode_attention", "prefill_compute", "prefill_attention", "overhead_layer_s"),
}  # fmt: skip
# Where every fit starts (so a refit does not depend on what the file held): round guesses of the right order.
START = {
    "llama.cpp": {"bandwidth": 0.8, "decode_compute": 40.0, "decode_attention": 10.0, "prefill_compute": 150.0,
                  "prefill_attention": 50.0, "overhead_step_s": 5e-4, "overhead_layer_s": 0.0},
    "transformers": {"bandwidth": 0.5, "decode_compute": 20.0, "decode_attention": 10.0, "prefill_compute": 50.0,
                     "prefill_attention": 50.0, "overhead_step_s": 0.0, "overhead_layer_s": 1e-3},
}  # fmt: skip


@cache
def cpu_setup(name: str, engine: str) -> tuple[Setup, Any]:
    if engine == "llama.cpp":
        # the runner's context: n_ubatch 512, flash attention auto (on for CPU), f16 cache, F16 GGUF weights
        eng = configured("llama.cpp", n_ubatch=512)
        setup = Setup(load_model(str(config_path(name))), eng, Card.custom(1), weights="fp16")
    else:
        eng = configured("transformers")
        setup = Setup(
            load_model(str(config_path(name))), eng, Card.custom(1), weights=PROBE_DTYPE, kv_dtype=PROBE_DTYPE
        )
    return setup, setup_weights(setup)


def predicted(
    row: dict[str, Any], engine: str, ram_gb_s: float, table=None, calibration: Calibration | None = None
) -> tuple[float, float, str]:
    """(decode tok/s, prefill tok/s, decode bound) kvscope predicts for one measured row; with `calibration`, at
    this host's measured matmul and attention rates and RAM figures, as the CLI times a calibrated host
    (python -m core calibrate)."""
    setup, weights = cpu_setup(row["model"], engine)
    if calibration is not None:
        hw = calibrated_host(calibration, row["threads"], cpu_only=True)
    else:
        hw = Hardware(ram_gb_s=ram_gb_s, threads=row["threads"], cpu_only=True)
    s = predict(setup, hw, row["context"], 1, table=table, weights=weights)
    return s.decode_tok_s, s.prefill_tok_s, s.bound


def log_loss(rows, engine: str, ram_gb_s: float, eff: Efficiency) -> float:
    table = {(engine, "cpu"): eff}
    total = 0.0
    for r in rows:
        dec, pre, _ = predicted(r, engine, ram_gb_s, table)
        # absolute log errors: one run slowed by other work on the machine pulls the fit less than squares would
        total += abs(math.log(dec / r["decode_tok_s"])) + abs(math.log(pre / r["prefill_tok_s"]))
    return total


def descend(
    loss: Callable[[dict[str, float]], float],
    start: dict[str, float],
    keys: Iterable[str],
    rounds: int,
    min_step: float,
    floor: Callable[[str, float], float] = lambda _key, value: max(value, 1e-9),
) -> tuple[dict[str, float], float]:
    """Coordinate descent on the logarithms of `keys` (the others stay as in `start`): each round tries ×e^±step on
    every key in turn and keeps what lowers `loss`; the step halves when no move helps, down to `min_step`. `floor`
    gives the value a step starts from (a parameter at 0 could never leave it). Returns (parameters, loss)."""
    p = dict(start)
    best = loss(p)
    step = 1.0  # natural-log units
    for _ in range(rounds):
        moved = False
        for key in keys:
            for sign in (1, -1):
                trial = p | {key: floor(key, p[key]) * math.exp(sign * step)}
                value = loss(trial)
                if value < best - 1e-12:
                    p, best, moved = trial, value, True
        if not moved:
            step /= 2
            if step < min_step:
                break
    return p, best


def fit(rows, engine: str, ram_gb_s: float, rounds: int = 40) -> tuple[Efficiency, float]:
    eff = replace(efficiency_for(engine, "cpu"), **START[engine])
    keys = FIT_KEYS[engine]
    p, best = descend(
        lambda q: log_loss(rows, engine, ram_gb_s, replace(eff, **q)),
        {k: getattr(eff, k) for k in keys}, keys, rounds, 1e-3,
    )  # fmt: skip
    return replace(eff, **p), best
