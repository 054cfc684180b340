"""The calibration a page starts in the background (core.speed.calibrate_job): its outcome, one at a time, and a
run past its timeout killed with the processes it started."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from core.speed.calibrate_job import CalibrationBusy, CalibrationJob, active_calibration


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    job = active_calibration()
    if job is not None:
        job.wait(30)


def test_an_ok_run_returns_the_commands_json():
    job = CalibrationJob(python("import json; print(json.dumps({'ram_gb_s': 12.5, 'rates': []}))"))
    out = job.wait(30)
    assert out is not None and out.status == "ok", out
    assert out.record == {"ram_gb_s": 12.5, "rates": []}
    assert active_calibration() is None


def test_a_failing_run_says_why():
    out = CalibrationJob(python("import sys; sys.exit('no llama.cpp here')")).wait(30)
    assert out is not None and out.status == "error" and "no llama.cpp here" in out.error


def test_a_second_calibration_is_refused_while_one_runs():
    first = CalibrationJob(python("import time; time.sleep(3); print('{}')"))
    assert active_calibration() is first
    with pytest.raises(CalibrationBusy, match="still running"):
        CalibrationJob(python("print('{}')"))
    assert first.wait(30) is not None
    again = CalibrationJob(python("print('{}')"))  # free again once the first has ended
    assert again.wait(30).status == "ok"


def test_a_run_past_its_timeout_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    # the command starts a grandchild (as calibrate starts llama.cpp's python) and both sleep past the timeout
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    start = time.time()
    out = CalibrationJob(python(code), timeout=2.0).wait(30)
    assert out is not None and out.status == "timeout"
    assert time.time() - start < 20
    child = int(pid_file.read_text())
    for _ in range(50):  # reaped by init once killed; gone from the process table shortly after
        stat = Path(f"/proc/{child}/stat")
        if not stat.exists() or stat.read_text().split()[2] == "Z":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the calibration's child {child} outlived the timeout")
