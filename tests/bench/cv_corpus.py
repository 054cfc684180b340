"""Five-fold cross-validation by machine on llama.cpp's fit rows of the speed corpus: how a change to the fit
(tests/bench/fit_corpus.py) is judged without looking at the held-out runs.

    python tests/bench/cv_corpus.py

Each machine (fit_corpus.Row.unit: a lab's runs on one card) falls in one of five folds by the sha256 of its name;
each fold's runs are predicted from fit_all on the other four folds' fit rows, as a held-out run is from the full
fit (a run of an old build with its group's old-build terms, as fit_corpus.old_build_table does). The held-out runs
take no part. Prints decode within ±20 %, the median |error| and the mean |log error| per kind, then decode per
backend and card class. About five full fits: 4–8 minutes on two cores.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.speed.efficiency import efficiency_in, entry
from core.speed.groups import error_stats
from tests.bench import fit_corpus as fc

FOLDS = 5


def fold_of(unit: tuple[str, str]) -> int:
    return int(hashlib.sha256(repr(unit).encode()).hexdigest(), 16) % FOLDS


def cross_validate(rows: list[fc.Row]) -> list[tuple[fc.Row, float]]:
    """predicted ÷ measured of every llama.cpp fit row, each from a fit without its fold's machines (left out of the
    rows fit_all sees, as fit_corpus.cross_checked leaves out a lab's)."""
    mine = [r for r in rows if not r.held_out and r.setup.engine.name == "llama.cpp"]
    out = []
    for k in range(FOLDS):
        fold = {r.unit for r in mine if fold_of(r.unit) == k}
        fits = fc.fit_all([r for r in rows if r.unit not in fold])
        groups = {(e["engine"], e["backend"], e["card_class"]): entry(e) for e in fits}
        for r in (r for r in mine if r.unit in fold):
            engine, backend, klass = r.group
            table = fc.old_build_table(r, fits) or {
                (engine, "gpu"): efficiency_in(groups, engine, "gpu", backend, klass)
            }
            try:
                out.append((r, fc.predicted_tok_s(r, table) / r.raw["tok_s"]))
            except fc.InputError:
                continue
    return out


def main() -> None:
    results = cross_validate(fc.load_rows()[0])
    for kind in ("decode", "prefill"):
        qs = [q for r, q in results if r.kind == kind]
        median, within, _ = error_stats(qs)
        log = statistics.mean(abs(math.log(q)) for q in qs)
        print(f"{kind}: {len(qs)} runs, {within:.1%} within ±20 %, median |error| {median:.1%}, mean |log| {log:.3f}")
    groups: dict[tuple[str, str], list[float]] = {}
    for r, q in results:
        if r.kind == "decode":
            groups.setdefault((r.backend, r.klass), []).append(q)
    for (backend, klass), qs in sorted(groups.items()):
        print(f"  decode {backend} {klass}: {len(qs)} runs, {error_stats(qs)[1]:.0%} within ±20 %")


if __name__ == "__main__":
    main()
