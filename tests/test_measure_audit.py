"""Audit of Measure live and the calibration: saved results and calibrations under two writers, damaged or
unwritable files, runs that must not overlap, and what a saved probe records of what produced it."""

from __future__ import annotations

import json
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from core.errors import InputError
from core.files import write_json_atomic
from core.probe import ProbeBusy, ProbeJob, ProbeRequest, ProbeResult, active_job, load_results, run_probe
from core.probe.request import ContextResult
from core.probe.results import RESULTS_NAME
from core.speed import calibration
from core.speed.calibrate_job import CalibrationBusy, CalibrationJob, active_calibration
from core.speed.calibration import Calibration
from tests.conftest import ROOT
from tests.tiny_configs import tiny_raw
from ui.state import pack_config

PAGE = "pages/2_measure_live.py"


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    job = active_job()
    if job is not None:
        job.cancel()
        job.wait(30)
    cal = active_calibration()
    if cal is not None:
        cal.wait(30)


def cal_of(host: str, ram: float = 10.0) -> Calibration:
    return Calibration(host, "2026-12-06 00:00 UTC", "test", ram, 2, (("Q4_0", 3.0, 7.0),))


def open_page(monkeypatch, probe_dir: Path) -> AppTest:
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(probe_dir))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["config"] = pack_config(tiny_raw("llama", layers=2))
    at.run()
    at = at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def run_button(at: AppTest):
    return next(b for b in at.button if b.label == "Run probe")


def waiting_calibration(tmp_path: Path) -> tuple[CalibrationJob, Path]:
    """A stand-in calibration that runs until the returned file exists."""
    done = tmp_path / "calibration-done"
    code = f"import os, time\nwhile not os.path.exists({str(done)!r}): time.sleep(0.05)\nprint('{{}}')"
    return CalibrationJob([sys.executable, "-c", code], timeout=60), done


# --- saved files: two writers, damage, a folder that cannot be written ---------------------------------------------


def test_two_threads_writing_one_json_file_never_show_a_reader_half_a_file(tmp_path):
    """Every writer of one process used the same temporary name: a second writer truncated and refilled the file
    the first then renamed into place, so readers saw half-written JSON and the second write failed silently."""
    path = tmp_path / "shared.json"
    values = [{"k": c * 1_000_000} for c in "abc"]
    failed, torn = [], []

    def write(value: dict) -> None:
        failed.extend(v for v in (value,) * 15 if not write_json_atomic(path, v))

    def read() -> None:
        for _ in range(400):
            try:
                json.loads(path.read_bytes())
            except FileNotFoundError:
                pass
            except ValueError:
                torn.append(1)

    threads = [threading.Thread(target=write, args=(v,)) for v in values] + [threading.Thread(target=read)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed and not torn, f"{len(failed)} writes lost, {len(torn)} torn reads"
    assert json.loads(path.read_bytes()) in values
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared.json"]  # no temporary file left behind


def _at_once(target: Any, where: str, n: int) -> None:
    """Two processes, "a" and "b", each running target(where, prefix, n, barrier), released together."""
    # fork: spawn re-runs the parent's __main__, which after an AppTest in the same session is app.py
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=target, args=(where, p, n, barrier)) for p in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0


def _store_many(cache: str, prefix: str, n: int, barrier: Any) -> None:
    import os

    os.environ["KVSCOPE_CACHE"] = cache
    barrier.wait(60)  # both processes started and imported: their stores overlap
    for i in range(n):
        calibration.store(cal_of(f"{prefix}-{i}"))


def test_two_processes_storing_calibrations_at_once_lose_neither(tmp_path, monkeypatch):
    """store() reads the file, adds its host and writes it back: two at once (the command line and the app, or two
    hosts sharing a home directory) each wrote back what they read, dropping the other's new entry."""
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    _at_once(_store_many, str(tmp_path), 60)
    hosts = json.loads(calibration.path().read_text())["hosts"]
    assert sorted(hosts) == sorted(f"{p}-{i}" for p in "ab" for i in range(60))


def _append_many(path: str, prefix: str, n: int, barrier: Any) -> None:
    from core.probe.results import append_result

    barrier.wait(60)
    for i in range(n):
        append_result(Path(path), {"model": f"{prefix}-{i}", "notes": ["x" * 20_000]})  # past any atomic pipe write


def test_two_processes_appending_results_at_once_keep_every_line_whole(tmp_path):
    """Already sound (flock + one write per line); kept as the check that it stays so."""
    path = tmp_path / RESULTS_NAME
    path.write_text('{"model": "earlier"}\n')
    _at_once(_append_many, str(path), 40)
    rows, warnings = load_results(path)
    assert warnings == [] and rows[0]["model"] == "earlier"
    assert sorted(r["model"] for r in rows[1:]) == sorted(f"{p}-{i}" for p in "ab" for i in range(40))


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("[1, 2]", "is not a calibration file"),
        ('{"hosts": []}', "is not a calibration file"),
        ('{"hosts": {"x": ', "cannot be read"),
        (b"\xff\xfe", "cannot be read"),
    ],
)
def test_a_damaged_calibration_file_is_said_and_kept_not_written_over(tmp_path, monkeypatch, content, says):
    """A calibration file that is valid JSON but not an object raised AttributeError on every page load (a
    traceback on Measure live and in every CPU speed figure); a damaged one read as "never calibrated", and the
    next calibration wrote over it, so the other hosts' entries in it were gone without a word."""
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    path = calibration.path()
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    stored, problem = calibration.load_checked()
    assert stored is None and calibration.load() is None
    assert problem is not None and says in problem and "calibrate again" in problem
    calibration.store(cal_of(calibration.host_key()))
    assert calibration.load() == cal_of(calibration.host_key())
    kept = [p for p in tmp_path.iterdir() if p.name.startswith(f"{calibration.FILE}.unreadable-")]
    assert len(kept) == 1 and kept[0].read_bytes() == (content if isinstance(content, bytes) else content.encode())


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("rates", [["Q4_0", "fast", None]], "'fast'"),
        ("ram_gb_s", None, "ram_gb_s"),
        ("threads", 0, "threads"),
        ("rates", 5, "wrong shape"),
        ("time", None, "no 'time' field"),
    ],
)
def test_a_hand_edited_or_older_calibration_entry_is_named_not_used(tmp_path, monkeypatch, field, value, says):
    """A rate stored as text reached the speed arithmetic (TypeError in every CPU figure); an entry missing a field
    read as "never calibrated", silently."""
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    other = cal_of("another host").record()
    entry = cal_of(calibration.host_key()).record()
    if value is None and field == "time":
        del entry["time"]
    else:
        entry[field] = value
    calibration.path().write_text(json.dumps({"hosts": {calibration.host_key(): entry, "another host": other}}))
    stored, problem = calibration.load_checked()
    assert stored is None and problem is not None and says in problem, problem
    assert calibration.load("another host") == cal_of("another host")  # the good entry beside it still reads
    calibration.store(cal_of(calibration.host_key()))
    assert calibration.load_checked() == (cal_of(calibration.host_key()), None)
    assert calibration.load("another host") == cal_of("another host")


def test_a_results_file_that_cannot_be_read_is_a_warning(tmp_path):
    (tmp_path / RESULTS_NAME).mkdir()  # something else in its place: IsADirectoryError was a traceback
    rows, warnings = load_results(tmp_path / RESULTS_NAME)
    assert rows == [] and len(warnings) == 1 and "cannot be read" in warnings[0]


def test_a_probe_folder_that_cannot_be_written_is_said_before_anything_runs(tmp_path):
    (tmp_path / "file").write_text("x")
    request = ProbeRequest(model="unused", contexts=(4,))
    with pytest.raises(InputError, match="set KVSCOPE_PROBE_DIR to a writable folder"):
        ProbeJob(request, directory=tmp_path / "file" / "sub")
    assert active_job() is None


def test_the_page_says_what_is_wrong_with_its_files_and_keeps_working(tmp_path, monkeypatch):
    """The results file unreadable, the calibration file damaged, the probe folder unwritable: a warning or an
    error each, never a traceback."""
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path / "cache"))
    calibration.path().parent.mkdir()
    calibration.path().write_text("[]")
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / RESULTS_NAME).mkdir()
    at = open_page(monkeypatch, tmp_path / "probes")
    warnings = [w.value for w in at.warning]
    assert any("probes.jsonl cannot be read" in w for w in warnings), warnings
    assert any("is not a calibration file" in w and "fitted constants" in w for w in warnings), warnings
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path / "file" / "sub"))
    next(t for t in at.text_input if t.label == "Contexts").input("8")
    run_button(at).click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("set KVSCOPE_PROBE_DIR to a writable folder" in e.value for e in at.error), [e.value for e in at.error]
    assert active_job() is None


# --- runs that must not overlap -------------------------------------------------------------------------------------


def test_calibrate_refuses_more_threads_than_cores_and_a_second_run(tmp_path, monkeypatch):
    """`--threads 1000000` stored rates per thread a million times too slow over the host's good calibration; two
    calibrations at once (the command line beside the app's button) timed each other."""
    import os

    from core.speed import calibrate as cal_mod

    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    cores = os.cpu_count() or 1
    with pytest.raises(InputError, match=f"give at most {cores}"):
        cal_mod.calibrate(cores + 1, "numpy")
    start = time.monotonic()
    with (
        cal_mod._one_at_a_time(),
        pytest.raises(InputError, match=rf"a calibration \(pid {os.getpid()}\) since .* is measuring this host"),
    ):
        cal_mod.calibrate(None, "numpy")
    assert time.monotonic() - start < 1  # refused before any timing
    assert not calibration.path().exists()


def test_calibrate_into_a_cache_that_cannot_be_written_says_so_before_timing(tmp_path, monkeypatch):
    """It timed for minutes, then failed to store."""
    from core.speed.calibrate import calibrate

    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path / "file" / "sub"))
    start = time.monotonic()
    with pytest.raises(InputError, match="set KVSCOPE_CACHE to a writable folder"):
        calibrate(None, "numpy")
    assert time.monotonic() - start < 1


def test_a_probe_and_a_calibration_never_run_at_once(tmp_path):
    """The page disabled Calibrate while a probe ran, but not Run probe while a calibration ran, and two sessions
    could start one each: each would slow the other's timings."""
    cal, done = waiting_calibration(tmp_path)
    request = ProbeRequest(model="unused", contexts=(4,))
    with pytest.raises(ProbeBusy, match="calibration of this machine"):
        ProbeJob(request, directory=tmp_path)
    assert active_job() is None
    # the probe's lock was given back: the next probe is refused for the calibration only, not for a stale lock
    with pytest.raises(ProbeBusy, match="calibration of this machine"):
        ProbeJob(request, directory=tmp_path)
    done.touch()
    assert cal.wait(30).status == "ok"


def test_a_calibration_is_refused_while_a_probe_runs(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_raw("llama")))
    job = ProbeJob(ProbeRequest(model=str(path), contexts=(4,), debug="sleep:60"), directory=tmp_path, record=False)
    with pytest.raises(CalibrationBusy, match="a probe of"):
        CalibrationJob([sys.executable, "-c", "print('{}')"])
    assert active_calibration() is None
    job.cancel()
    assert job.wait(30) is not None


def test_the_page_disables_run_probe_while_a_calibration_runs(tmp_path, monkeypatch):
    cal, done = waiting_calibration(tmp_path)
    at = open_page(monkeypatch, tmp_path)
    assert run_button(at).disabled
    assert any("Disabled while this machine is being calibrated" in c.value for c in at.caption)
    done.touch()
    assert cal.wait(30).status == "ok"
    at.run()
    assert not run_button(at).disabled


# --- what a result records and shows -------------------------------------------------------------------------------


def test_a_saved_probe_records_the_code_and_dtype_that_produced_it(tmp_path):
    """Settings recorded "dtype": "auto" and nothing said which kvscope made the prediction."""
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(tiny_raw("llama")))
    result = run_probe(ProbeRequest(model=str(path), contexts=(4,), decode_steps=2), timeout=120, directory=tmp_path)
    assert result.ok, (result.error, result.log_tail)
    (record,) = load_results(tmp_path / RESULTS_NAME)[0]
    assert record["settings"]["dtype"] == "auto" and record["settings"]["dtype_used"] in ("fp32", "bf16", "fp16")
    assert record["settings"]["dtype_used"] == result.dtype
    revision = record["versions"]["kvscope"]
    if (ROOT / ".git").exists():  # a source tree without git has no commit to name
        assert revision and len(revision.split()[0]) == 12 and int(revision.split()[0], 16) >= 0
    assert record["host"] and record["time"] and record["versions"]["torch"] and record["settings"]["backend"]


def test_vllms_prediction_is_per_gpu_of_the_runs_tensor_parallel_group():
    """vLLM's "Available KV cache memory" is one GPU's; the prediction it was divided by was the whole model's
    cache, so at --tensor-parallel-size 2 the predicted concurrency read half of vLLM's."""
    from core.model.loading import load_model

    spec = load_model("Qwen/Qwen3-8B")  # 8 KV heads: two GPUs hold four each
    one, two = (
        ProbeRequest("Qwen/Qwen3-8B", backend="vllm", tensor_parallel_size=tp).vllm_engine("cuda").account(spec, 4096)
        for tp in (1, 2)
    )
    assert two.total * 2 == one.total


def test_the_page_shows_vllms_measured_concurrency_beside_the_prediction_and_no_made_up_zero(tmp_path, monkeypatch):
    """Under vLLM the table showed only the cache columns, measured empty, and a missing prediction as 0 MiB."""
    rows = (
        ContextResult(1024, 2 << 20, None, None, "vLLM", 0.1, 1e4, 50.0, "vllm", None, 9000, 8.8, 8.0),
        ContextResult(2048, None, None, None, "vLLM", 0.2, 1e4, 50.0, "vllm", None, 9000, 4.4, None),
    )
    result = ProbeResult("ok", ProbeRequest(model="m", backend="vllm"), rows, "m", "cuda:0 (H100)", dtype="bf16")
    at = open_page(monkeypatch, tmp_path)
    at.session_state["probe_job"] = SimpleNamespace(running=False, result=result)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert table["predicted (MiB)"].iloc[0] == 2.0 and table["predicted (MiB)"].isna().iloc[1]
    assert list(table["vLLM max concurrency"]) == [8.8, 4.4]
    assert table["concurrency measured ÷ predicted"].iloc[0] == pytest.approx(1.1)
    assert table["concurrency measured ÷ predicted"].isna().iloc[1]
    assert any("(vllm, bf16, batch 1)" in m.value for m in at.markdown), [m.value for m in at.markdown]


# --- the form's contexts --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "contexts"),
    [("512, 2k", (512, 2048)), ("64,000", (64_000,)), ("1,024, 4k", (1024, 4096)), ("512,2048", (512, 2048))],
)
def test_contexts_read_thousands_as_token_counts_do(typed, contexts):
    """The page split on every comma: "64,000" (a token count as parse_tokens and every other box reads it) was
    the contexts 64 and 0, refused as "token count must be positive, got '000'"."""
    from core.probe.request import parse_contexts

    assert parse_contexts(typed) == contexts


def test_a_long_context_that_cannot_be_read_is_quoted_by_its_first_40_characters(tmp_path, monkeypatch):
    """A link's 500-character pctx was repeated whole in the error (569 characters)."""
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["config"] = pack_config(tiny_raw("llama", layers=2))
    at.query_params["pctx"] = "512, " + "x" * 500
    at.run()
    at = at.switch_page(PAGE).run()
    run_button(at).click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert "x" * 40 in error and "x" * 41 not in error and len(error) < 120, error
    assert active_job() is None
