"""Faults: the probe process killed with SIGKILL mid-run or out of memory, the disk full while saving, the Hub gone
mid-fetch and a results file edited by hand. Each leaves the app usable and the results file intact: its earlier
lines byte for byte, every line whole."""

from __future__ import annotations

import errno
import json
import os
import signal
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import core.probe.results as results
from core.errors import InputError
from core.model.loading import load_raw
from core.probe import ProbeJob, ProbeRequest, ProbeResult, active_job, load_results, run_probe
from core.probe.results import RESULTS_NAME, append_result
from core.probe.runner import probe_lock
from tests.conftest import ROOT
from tests.test_app import app
from tests.tiny_configs import tiny_raw

EARLIER = {"time": "2026-01-01T00:00:00+00:00", "model": "earlier", "status": "ok", "measured": []}


@pytest.fixture
def probe_dir(monkeypatch, tmp_path):
    folder = tmp_path / "probes"
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(folder))
    append_result(folder / RESULTS_NAME, EARLIER)
    yield folder
    job = active_job()
    if job is not None:
        job.cancel()
        job.wait(30)


def _intact(folder: Path, before: bytes) -> list[dict]:
    data = (folder / RESULTS_NAME).read_bytes()
    assert data.startswith(before)  # earlier runs untouched
    rows, warnings = load_results(folder / RESULTS_NAME)
    assert warnings == [] and data.endswith(b"\n")  # every line whole
    return rows


def _request(tmp_path: Path, debug: str) -> ProbeRequest:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_raw("llama")))
    return ProbeRequest(model=str(path), contexts=(8,), decode_steps=2, device="cpu", debug=debug)


def _measure_page_works(folder: Path) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/2_measure_live.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(b.label == "Run probe" and not b.disabled for b in at.get("button") + at.get("form_submit_button"))
    return at


def test_probe_killed_with_sigkill_mid_run(probe_dir, tmp_path):
    before = (probe_dir / RESULTS_NAME).read_bytes()
    job = ProbeJob(_request(tmp_path, "sleep:60"), timeout=120)
    deadline = time.monotonic() + 30
    while job.pid is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert job.pid is not None
    os.kill(job.pid, signal.SIGKILL)
    result = job.wait(30)
    assert result is not None and result.status == "error"
    assert "died" in result.error and "-9" in result.error
    rows = _intact(probe_dir, before)
    assert [r["status"] for r in rows] == ["ok", "error"]  # the killed run is recorded, as an error
    with probe_lock(probe_dir, "next"):  # the lock went with the process
        pass
    _measure_page_works(probe_dir)


def test_probe_out_of_memory(probe_dir, tmp_path):
    before = (probe_dir / RESULTS_NAME).read_bytes()
    result = run_probe(_request(tmp_path, "oom"), timeout=60)
    assert result.status == "error" and "MemoryError" in result.error
    assert [r["status"] for r in _intact(probe_dir, before)] == ["ok", "error"]
    _measure_page_works(probe_dir)


def _full_disk(monkeypatch, keep: int):
    """os.write in the results module takes `keep` bytes, then the disk is full."""
    real = os.write

    def write(fd, data):
        if keep:
            real(fd, data[:keep])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(results.os, "write", write)


@pytest.mark.parametrize("keep", [0, 7])
def test_disk_full_while_saving_leaves_the_file_as_it_was(monkeypatch, probe_dir, keep):
    path = probe_dir / RESULTS_NAME
    before = path.read_bytes()
    _full_disk(monkeypatch, keep)
    with pytest.raises(OSError, match="No space"):
        append_result(path, {"model": "new", "status": "ok", "measured": []})
    assert path.read_bytes() == before  # a torn half-line is cut back off


def test_disk_full_after_a_probe_keeps_its_result_on_screen(monkeypatch, probe_dir, tmp_path):
    import core.probe.runner as runner

    done = ProbeResult(status="ok", request=_request(tmp_path, ""), model="tiny")
    monkeypatch.setattr(runner, "_run_child", lambda *args: done)
    _full_disk(monkeypatch, 5)
    before = (probe_dir / RESULTS_NAME).read_bytes()
    result = run_probe(done.request, timeout=10)
    assert result.ok and result.results_path is None
    assert any("not saved" in note and "No space" in note for note in result.notes)
    assert (probe_dir / RESULTS_NAME).read_bytes() == before
    monkeypatch.undo()


def test_the_hub_gone_mid_fetch(monkeypatch):
    """The connection drops while config.json downloads: one clear message; a bundled copy stands in if there is
    one, and the app stays usable."""
    import huggingface_hub
    from huggingface_hub.errors import HTTPError

    def dropped(*args, **kwargs):
        raise HTTPError("peer closed connection without sending complete message body")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", dropped)
    with pytest.raises(InputError, match=r"could not fetch config\.json .*try again"):
        load_raw("someorg/not-bundled", prefer_hub=True)
    _, raw, origin = load_raw("Qwen/Qwen3-8B", prefer_hub=True)
    assert raw["model_type"] == "qwen3" and origin.startswith("bundled preset (") and "try again" in origin
    at = app({"model": "Qwen/Qwen3-8B", "source": "Hub"})
    assert not at.exception and at.metric
    assert any("using the bundled preset" in w.value for w in at.warning)
    at = app({"model": "someorg/not-bundled-either", "source": "Hub"})
    assert not at.exception and not at.metric  # the reason, and no other model's figures in its place
    assert any("could not fetch config.json" in e.value for e in at.main.error)


def test_a_results_file_edited_by_hand(probe_dir):
    path = probe_dir / RESULTS_NAME
    good = {"time": "t", "model": "kept", "status": "ok", "measured": [{"context": 512, "ratio": 1.0}]}
    with path.open("ab") as f:
        f.write(b"this line was typed by hand\n")
        f.write(json.dumps({"model": "x", "measured": "not a list"}).encode() + b"\n")
        f.write(json.dumps({"model": "y", "measured": [{"context": "huge"}]}).encode() + b"\n")
        f.write(json.dumps({"model": ["z"], "measured": []}).encode() + b"\n")
        f.write(json.dumps([1, 2]).encode() + b"\n")
        f.write(b"\xff\xfe\n")
        f.write(json.dumps(good).encode() + b"\n")
        f.write(b'{"model": "torn at the end"')  # no newline: an editor left it
    before = path.read_bytes()
    rows, warnings = load_results(path)
    assert [r["model"] for r in rows] == ["earlier", "kept"]
    assert len(warnings) == 7 and all("skipped" in w for w in warnings)
    at = _measure_page_works(probe_dir)
    assert len([w for w in at.warning if "skipped" in w.value]) == 7
    table = at.dataframe[-1].value
    assert list(table["model"]) == ["kept", "earlier"]
    assert path.read_bytes() == before  # showing it changed nothing
    append_result(path, {"model": "after", "status": "ok", "measured": []})
    assert path.read_bytes().startswith(before)
    rows, _ = load_results(path)
    assert rows[-1]["model"] == "after"  # the torn tail did not swallow the new line
