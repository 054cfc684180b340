"""Measure live, third round: a probe and a calibration kept apart across processes, the calibration's record of
the kvscope that made it, and the probe results file kept to a bound."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from core.errors import InputError
from core.probe import ProbeBusy, ProbeJob, ProbeRequest, active_job, load_results, run_probe
from core.probe import results as results_mod
from core.probe.results import RESULTS_NAME, append_result, trim_note
from core.speed import calibration
from core.speed.calibrate import _one_at_a_time, calibrate
from core.speed.calibrate_job import CalibrationJob
from tests.conftest import ROOT
from tests.test_measure_audit import _at_once, open_page, run_button
from tests.tiny_configs import tiny_raw

# fork: spawn re-runs the parent's __main__, which after an AppTest in the same session is app.py
FORK = multiprocessing.get_context("fork")


def _tiny(tmp_path: Path) -> str:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_raw("llama")))
    return str(path)


# --- a probe and a calibration kept apart across processes ---------------------------------------------------------


def _hold(kind: str, folder: str) -> None:
    """In a forked process: hold a calibration's lock, or run a real probe (sleeping), until <folder>/release exists;
    <folder>/held says it holds the host (with its probe's pid). Files, not multiprocessing's Event: a holder killed
    inside Event.wait leaves the Event's lock held, and setting it then hangs."""
    release, held = Path(folder) / "release", Path(folder) / "held"
    if kind == "calibration":
        with _one_at_a_time():
            held.write_text("-1")
            while not release.exists():
                time.sleep(0.02)
        return
    request = ProbeRequest(model=str(Path(folder) / "tiny.json"), name="held model", contexts=(4,), debug="sleep:60")
    job = ProbeJob(request, timeout=120, directory=folder, record=False)
    while job.pid is None:
        time.sleep(0.02)
    held.write_text(str(job.pid))
    while not release.exists():
        time.sleep(0.02)
    job.cancel()
    job.wait(30)


def _holder(kind: str, tmp_path: Path) -> tuple[Any, int]:
    """(the forked holder, its probe's pid or -1) once it holds the host's lock; touch tmp_path/release to end it."""
    _tiny(tmp_path)
    proc = FORK.Process(target=_hold, args=(kind, str(tmp_path)))
    proc.start()
    held = tmp_path / "held"
    deadline = time.monotonic() + 60
    while not (held.exists() and held.read_text()) and proc.is_alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert held.exists(), f"the {kind} never started (exit {proc.exitcode})"
    return proc, int(held.read_text())


def _free_within(seconds: float) -> bool:
    """Whether this host's lock can be taken within `seconds`: a killed process's flocks go once its last thread has
    exited, which can be a moment after its main thread shows as ended."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with _one_at_a_time():
                return True
        except InputError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


@pytest.mark.parametrize("end", ["exit", "crash"])
def test_a_probe_is_refused_while_another_process_calibrates(tmp_path, monkeypatch, end):
    """Probe and calibration refused each other only inside one server (a threading lock): a probe started on the
    command line while the app calibrated (or two servers on one host) ran, and each timed the other's load."""
    holder, _ = _holder("calibration", tmp_path)
    try:
        with pytest.raises(ProbeBusy) as err:
            run_probe(ProbeRequest(model=_tiny(tmp_path), contexts=(4,)), timeout=30, directory=tmp_path)
        message = str(err.value)
        assert message.startswith(f"busy: a calibration (pid {holder.pid}) since ") and "measuring this host" in message
        assert message.endswith(f"wait for it to end, or stop it (kill {holder.pid})"), message
        at = open_page(monkeypatch, tmp_path)  # the app's button, in this (another) process
        next(t for t in at.text_input if t.label == "Contexts").input("8")
        run_button(at).click()
        at.run()
        assert not at.exception and any(f"a calibration (pid {holder.pid})" in w.value for w in at.warning)
        assert active_job() is None and not (tmp_path / RESULTS_NAME).exists()
    finally:
        (tmp_path / "release").touch() if end == "exit" else os.kill(holder.pid, signal.SIGKILL)
        holder.join(30)
    assert holder.exitcode == (0 if end == "exit" else -signal.SIGKILL)
    assert _free_within(10)  # released with its holder, however it ended


def test_a_calibration_is_refused_while_another_process_probes_until_the_probe_ends(tmp_path, monkeypatch):
    """The reverse order, through each way to calibrate: the function, the command line and the app's job. A crash
    of the process that started the probe frees the host once its probe process has noticed and ended."""
    holder, probe_pid = _holder("probe", tmp_path)
    try:
        named = f"a probe of held model (probe process pid {probe_pid}, started by pid {holder.pid} on "
        stop = f"wait for it to end, or stop it (Cancel on Measure live, or kill {probe_pid})"
        with pytest.raises(InputError) as err:
            calibrate(None, "numpy")
        assert str(err.value).startswith(f"busy: {named}") and str(err.value).endswith(stop), str(err.value)
        cli = subprocess.run([sys.executable, "-m", "core", "calibrate", "--with", "numpy"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert cli.returncode != 0 and named in cli.stderr and stop in cli.stderr, cli.stderr
        outcome = CalibrationJob(timeout=60).wait(60)  # the app's job: a refusal, said as one, not an error
        assert outcome is not None and outcome.status == "busy" and outcome.error.startswith(f"busy: {named}"), outcome
        assert outcome.error.endswith(stop)
        assert not calibration.path().exists()  # nothing timed, nothing stored
        os.kill(holder.pid, signal.SIGKILL)  # the process that started the probe crashes
        holder.join(30)
        # its probe process, which holds the lock too, sees its parent gone within a second and ends, freeing it
        assert _free_within(15)
    finally:
        (tmp_path / "release").touch()
        holder.join(30)
        with contextlib.suppress(ProcessLookupError):
            os.kill(probe_pid, signal.SIGKILL)


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


# --- the calibration records the kvscope that made it ----------------------------------------------------------------


def _head() -> str | None:
    """This checkout's commit, asked of git here (not through kvscope); None outside git."""
    out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def test_a_calibration_records_kvscopes_commit_and_the_command_prints_it(tmp_path, monkeypatch, capsys):
    """A probe's record named the kvscope that made it; a calibration's did not, though what it times changes
    between commits (one-thread rates, the cache stream apart)."""
    from core.speed import calibrate as cal_mod
    from core.speed.cli import print_calibration

    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    monkeypatch.setattr(cal_mod, "ram_bandwidth", lambda refresh: SimpleNamespace(gb_s=20.0, thread_gb_s=9.0))
    cal = calibrate(None, "numpy")
    calibration.store(cal)
    stored = json.loads(calibration.path().read_text())["hosts"][calibration.host_key()]
    head = _head()
    if head is None:  # a source tree without git has no commit to name
        assert stored["kvscope"] is None
        return
    assert stored["kvscope"].split()[0] == head and calibration.load().kvscope == stored["kvscope"]
    print_calibration(cal.record() | {"stored": str(calibration.path()), "warning": None})
    assert f"at {cal.time} by kvscope {head}" in capsys.readouterr().out.splitlines()[0]


def test_an_older_calibration_without_a_commit_still_reads_and_the_page_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path / "cache"))
    entry = calibration.Calibration(calibration.host_key(), "2026-12-01 00:00 UTC", "m", 9.5, 2, (("Q4_0", 3, 7),))
    old = {k: v for k, v in entry.record().items() if k != "kvscope"}  # as stored before 2026-12-06
    calibration.path().parent.mkdir()
    calibration.path().write_text(json.dumps({"hosts": {calibration.host_key(): old}}))
    assert calibration.load_checked() == (entry, None)
    at = open_page(monkeypatch, tmp_path)
    (shown,) = [s.value for s in at.success if "RAM 9.5 GB/s" in s.value]
    assert "by a kvscope whose commit was not recorded" in shown
    calibration.store(replace(entry, kvscope="0123456789ab + changes to core/"))
    at.run()
    (shown,) = [s.value for s in at.success if "RAM 9.5 GB/s" in s.value]
    assert "(m), by kvscope 0123456789ab + changes to core/." in shown


def test_a_calibration_whose_commit_is_not_text_is_named_not_used(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    entry = calibration.Calibration(calibration.host_key(), "t", "m", 9.5, 2, (("Q4_0", 3, 7),)).record()
    calibration.path().write_text(json.dumps({"hosts": {calibration.host_key(): entry | {"kvscope": 5}}}))
    stored, problem = calibration.load_checked()
    assert stored is None and "kvscope is 5, not a commit" in problem and "calibrate again" in problem
