"""`python -m core calibrate` as a background job a web page starts and polls (pages/2_measure_live.py).

A calibration takes minutes, so it runs in its own process group, watched by a thread of the server: the page's
script never waits on it, other sessions keep drawing, and one calibration at a time runs per server (a second one
on the same cores would time the first). The command itself takes this host's measuring lock (core.files.measuring),
so a probe or calibration another process runs refuses it, and that refusal is its error. A run past its timeout is
killed with every process it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from core.files import BUSY

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 900.0  # six formats through llama.cpp take 1–5 minutes on a desktop; a loaded 2-core host, more


class CalibrationBusy(RuntimeError):
    """Another calibration is running on this server."""


@dataclass(frozen=True)
class CalibrationOutcome:
    status: str  # "ok" | "error" | "timeout" | "busy" (another process measures this host: error says which)
    elapsed_s: float
    record: dict | None  # `python -m core calibrate --json`'s output when ok
    error: str = ""


def calibrate_command(threads: int | None = None) -> list[str]:
    return [sys.executable, "-m", "core", "calibrate", "--json"] + ([f"--threads={threads}"] if threads else [])


class CalibrationJob:
    """One `python -m core calibrate` run on a background thread; the constructor raises CalibrationBusy if one is
    already running here."""

    def __init__(self, command: list[str] | None = None, timeout: float = TIMEOUT_S) -> None:
        from core.probe.runner import active_job  # here: core.probe.runner imports this module for GUARD

        global _ACTIVE
        with GUARD:
            if _ACTIVE is not None and _ACTIVE.running:
                raise CalibrationBusy(
                    f"a calibration started {time.time() - _ACTIVE.started:.0f} s ago is still running on this server"
                )
            probe = active_job()
            if probe is not None:
                raise CalibrationBusy(
                    f"a probe of {probe.request.name or probe.request.model} is running on this server; calibrate "
                    "once it has ended (the two would slow each other's timings)"
                )
            self.started = time.time()
            self.result: CalibrationOutcome | None = None
            self._thread = threading.Thread(
                target=self._run, args=(command or calibrate_command(), timeout), name="kvscope-calibrate", daemon=True
            )
            _ACTIVE = self
            self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> CalibrationOutcome | None:
        self._thread.join(timeout)
        return None if self.running else self.result

    def _run(self, command: list[str], timeout: float) -> None:
        try:
            self.result = _run_process(command, timeout, self.started)
        except Exception as err:  # the page must always get an outcome, never a thread that died silently
            self.result = CalibrationOutcome("error", time.time() - self.started, None, f"{type(err).__name__}: {err}")


def _run_process(command: list[str], timeout: float, started: float) -> CalibrationOutcome:
    # its own session: on timeout the whole group goes (the calibration starts llama.cpp in a child of its own)
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return CalibrationOutcome("timeout", time.time() - started, None, f"stopped after {timeout:.0f} s")
    elapsed = time.time() - started
    if proc.returncode != 0:
        said = (err or out).strip()
        refusal = said.removeprefix("error: ")  # as the command prints an InputError
        if refusal.startswith(BUSY):  # core.files.measuring's refusal: nothing ran, so not the calibration's error
            return CalibrationOutcome("busy", elapsed, None, refusal)
        return CalibrationOutcome("error", elapsed, None, said[-2000:] or f"exit {proc.returncode}")
    try:
        return CalibrationOutcome("ok", elapsed, json.loads(out))
    except ValueError:
        return CalibrationOutcome("error", elapsed, None, f"unreadable output: {out.strip()[-500:]!r}")


def active_calibration() -> CalibrationJob | None:
    """The calibration running on this server, if any."""
    job = _ACTIVE
    return job if job is not None and job.running else None


_ACTIVE: CalibrationJob | None = None
# Held while a calibration or a probe (core.probe.ProbeJob) starts: each checks that the other is not running, so
# two sessions pressing the two buttons at once cannot start both. The host's measuring lock does not cover this: the
# calibration's process takes it a moment after it starts.
GUARD = threading.Lock()
