"""Measure live, third round: a probe and a calibration kept apart across processes, the calibration's record of
the kvscope that made it, and the probe results file kept to a bound."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from core.probe import load_results
from core.probe import results as results_mod
from core.probe.results import RESULTS_NAME, append_result, trim_note
from tests.test_measure_audit import _at_once, open_page

# --- the results file kept to a bound --------------------------------------------------------------------------------


def test_the_results_file_keeps_the_newest_records_and_notes_the_trim(tmp_path, monkeypatch):
    """probes.jsonl grew without end, and the page read all of it at every run."""
    monkeypatch.setattr(results_mod, "MAX_RECORDS", 5)
    path = tmp_path / RESULTS_NAME
    assert trim_note(path) is None
    for i in range(8):
        append_result(path, {"model": f"m{i}", "measured": []})
    rows, warnings = load_results(path)
    assert warnings == [] and [r["model"] for r in rows] == ["m3", "m4", "m5", "m6", "m7"]
    assert trim_note(path).startswith("probes.jsonl keeps the newest 5 runs: 3 older runs dropped (the last on 20")
    append_result(path, {"model": "m8", "measured": []})
    assert "4 older runs dropped" in trim_note(path)  # counted across trims
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        RESULTS_NAME,
        *(f"{RESULTS_NAME}.{s}" for s in ("lock", "trimmed.json")),
    ]


def test_a_trim_that_cannot_be_written_keeps_every_line(tmp_path, monkeypatch):
    monkeypatch.setattr(results_mod, "MAX_RECORDS", 2)
    monkeypatch.setattr(results_mod, "write_bytes_atomic", lambda *_: False)  # a full disk, a read-only folder
    path = tmp_path / RESULTS_NAME
    for i in range(4):
        append_result(path, {"model": f"m{i}", "measured": []})
    assert [r["model"] for r in load_results(path)[0]] == ["m0", "m1", "m2", "m3"]
    assert trim_note(path) is None  # nothing was dropped, so nothing says so


def _append_many(path: str, prefix: str, n: int, barrier: Any) -> None:
    barrier.wait(60)
    for i in range(n):
        append_result(Path(path), {"model": f"{prefix}-{i}", "notes": ["x" * 5_000]})


def test_two_processes_appending_past_the_bound_keep_the_newest_and_every_line_whole(tmp_path, monkeypatch):
    """A trim replaces the file: a writer waiting on the old file's own flock would append to a file no longer there
    (its record lost), and a reader must never see a half-written one."""
    monkeypatch.setattr(results_mod, "MAX_RECORDS", 30)  # the forked writers inherit it
    path = tmp_path / RESULTS_NAME
    path.write_text('{"model": "earlier"}\n')
    torn: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            torn.extend(load_results(path)[1])

    reader = threading.Thread(target=read)
    reader.start()
    try:
        _at_once(_append_many, str(path), 40)
    finally:
        stop.set()
        reader.join()
    rows, warnings = load_results(path)
    assert warnings == [] and torn == [] and len(rows) == 30
    for prefix in "ab":  # each writer's kept records are its newest, in the order it wrote them
        kept = [int(r["model"].split("-")[1]) for r in rows if r["model"].startswith(prefix)]
        assert kept == list(range(40 - len(kept), 40)), (prefix, kept)
    assert "51 older runs dropped" in trim_note(path)  # 1 + 2 × 40 written, 30 kept: none lost without a count


def test_the_page_says_older_runs_were_trimmed(tmp_path, monkeypatch):
    monkeypatch.setattr(results_mod, "MAX_RECORDS", 2)
    for i in range(3):
        append_result(tmp_path / RESULTS_NAME, {"model": f"m{i}", "status": "ok", "measured": []})
    at = open_page(monkeypatch, tmp_path)
    captions = [c.value for c in at.caption]
    assert any(c.startswith("probes.jsonl keeps the newest 2 runs: 1 older run dropped") for c in captions), captions
    assert list(at.dataframe[-1].value["model"]) == ["m2", "m1"]
    (tmp_path / f"{RESULTS_NAME}.trimmed.json").write_text("{")
    at.run()
    assert any("cannot be read" in c.value and "older runs dropped" in c.value for c in at.caption)
    assert not at.exception
