"""The Measure live page under AppTest: a real CPU probe in a child process, end to end, and what the page does
while one runs (progress, Cancel, past runs, a second session)."""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest
from streamlit.testing.v1 import AppTest

import core.probe
from core.probe import ProbeRequest, active_job
from core.probe.runner import KILL_GRACE_S
from tests.conftest import ROOT
from tests.tiny_configs import tiny_raw
from ui.state import pack_config

PAGE = "pages/2_measure_live.py"


@pytest.fixture(autouse=True)
def no_probe_left_running():
    yield
    job = active_job()
    if job is not None:  # a failed test must not leave its probe to block the next one
        job.cancel()
        job.wait(30)


def open_page(monkeypatch, tmp_path, raw):
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["config"] = pack_config(raw)
    at.query_params["engine"] = "transformers"
    at.run()
    return at.switch_page(PAGE).run()


def button(at, label):
    return next(b for b in at.button if b.label == label)


def labels(at) -> list[str]:
    return [b.label for b in at.button]


def start_probe(at, contexts="12, 40"):
    next(t for t in at.text_input if t.label == "Contexts").input(contexts)
    next(s for s in at.selectbox if s.label == "Device").set_value("cpu")
    button(at, "Run probe").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    job = active_job()
    assert job is not None, "the page should have started a probe"
    return job


def sleeping_probes(monkeypatch):
    """Probes whose process sleeps a minute before doing anything: a probe that is surely still running."""
    monkeypatch.setattr(core.probe, "ProbeRequest", functools.partial(ProbeRequest, debug="sleep:60"))


def test_cpu_probe_end_to_end_measures_what_kvscope_predicts(monkeypatch, tmp_path):
    at = open_page(monkeypatch, tmp_path, tiny_raw("qwen3_5_text"))
    assert not at.exception
    job = start_probe(at)
    assert job.wait(300) is not None
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert "Cancel" not in labels(at)  # gone once the probe has ended
    assert any(s.value.startswith("Probe ok") for s in at.success)
    table = at.dataframe[0].value
    assert list(table["context"]) == ["12", "40"]
    assert list(table["measured ÷ predicted"]) == [1.0, 1.0]
    assert (table["measured (MiB)"] > 0).all()
    assert "peak (GiB)" not in table.columns  # not measured on CPU: said in a caption, not a column of None
    assert any("Peak memory: not measured on CPU" in c.value for c in at.caption)
    records = [json.loads(line) for line in (tmp_path / "probes.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["status"] == "ok"
    assert [m["measured_cache_bytes"] for m in records[0]["measured"]] == [
        p["cache_bytes"] for p in records[0]["predicted"]
    ]
    # named after the model, not the temporary file the upload was written to
    assert records[0]["model"].startswith("qwen3_5_text (uploaded config.json ")
    assert records[0]["settings"]["scale"].startswith("full size")  # a tiny model runs whole on CPU
    assert list(at.dataframe[1].value["model"]) == [records[0]["model"]]
    # kvscope's speed for the same run beside the clock's, with what it timed this host by
    predicted = [p["decode_tok_s"] for p in records[0]["predicted"]]
    assert all(x > 0 for x in predicted) and list(table["predicted decode tok/s"]) == pytest.approx(predicted)
    assert list(table["decode measured ÷ predicted"]) == pytest.approx(list(table["decode tok/s"] / predicted))
    assert list(table["prefill measured ÷ predicted"]) == pytest.approx(
        list(table["prefill tok/s"] / table["predicted prefill tok/s"])
    )
    basis = records[0]["predicted"][0]["speed_basis"]
    assert "thread" in basis and any(f"on {basis}." in c.value for c in at.caption)


def test_cancel_ends_the_probe_process_at_once_and_the_page_stays_whole(monkeypatch, tmp_path):
    earlier = {"time": "2026-11-29T00:00:00", "model": "earlier", "status": "ok", "measured": []}
    (tmp_path / "probes.jsonl").write_text(json.dumps(earlier) + "\n")
    sleeping_probes(monkeypatch)
    at = open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    job = start_probe(at)
    assert job.running and "Cancel" in labels(at)
    assert [s.state for s in at.status] == ["running"]  # a spinner, not a tick, while the probe runs
    assert button(at, "Run probe").disabled
    assert list(at.dataframe[0].value["model"]) == ["earlier"]  # past runs stay while a probe runs
    assert job.wait(2) is None  # still sleeping: the cancel below is what ends it
    button(at, "Cancel").click()
    at.run()
    result = job.wait(KILL_GRACE_S + 5)  # a minute-long probe, ended within seconds of the click
    assert result is not None and result.status == "cancelled"
    with pytest.raises(ProcessLookupError):
        os.kill(job.pid, 0)  # the probe process is gone, not left running behind the page
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert "Cancel" not in labels(at)
    assert any(i.value.startswith("Probe cancelled after") for i in at.info)  # not "Probe cancelled: cancelled"
    assert not any("cancelled" in e.value for e in at.error)
    assert list(at.dataframe[0].value["model"])[-1] == "earlier"
    assert not button(at, "Run probe").disabled


def test_a_second_session_sees_the_running_probe_and_can_cancel_it(monkeypatch, tmp_path):
    sleeping_probes(monkeypatch)
    first = open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    job = start_probe(first)
    second = open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    assert not second.exception, [e.value for e in second.exception]
    assert button(second, "Run probe").disabled
    assert "Cancel" in labels(second)
    assert any("started from another session" in s.label for s in second.status)
    button(second, "Cancel").click()
    second.run()
    result = job.wait(KILL_GRACE_S + 5)
    assert result is not None and result.status == "cancelled"


def test_past_runs_skip_a_corrupted_line_with_a_warning(monkeypatch, tmp_path):
    good = {"time": "2026-11-29T00:00:00", "model": "m", "status": "ok", "measured": [{"context": 16, "ratio": 1.0}]}
    (tmp_path / "probes.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    at = open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    assert not at.exception
    assert any("line 2" in w.value or "skipped" in w.value for w in at.warning), [w.value for w in at.warning]
    assert list(at.dataframe[0].value["model"]) == ["m"]


def test_past_runs_show_the_worst_ratio_itself(monkeypatch, tmp_path):
    """1.0 is an exact prediction; the column shows the ratio farthest from it, and nothing when none was
    measured (vLLM reports no cache bytes), never 0 for a perfect match."""
    runs = [
        {"model": "exact", "measured": [{"context": 16, "ratio": 1.0}, {"context": 32, "ratio": 1.0}]},
        {"model": "over", "measured": [{"context": 16, "ratio": 0.99}, {"context": 32, "ratio": 1.02}]},
        {"model": "under", "measured": [{"context": 16, "ratio": 0.97}, {"context": 32, "ratio": None}]},
        {"model": "vllm", "measured": [{"context": 16, "ratio": None}]},
    ]
    (tmp_path / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in runs))
    at = open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    table = at.dataframe[0].value.set_index("model")["worst measured ÷ predicted"]
    assert table["exact"] == 1.0 and table["over"] == 1.02 and table["under"] == 0.97
    assert table.isna()["vllm"]


def test_the_page_icon_is_a_local_file_served_inline(monkeypatch, tmp_path):
    """A `:material/...:` icon makes the browser fetch an icon font from a CDN (two console errors offline)."""
    import streamlit
    from streamlit.commands.page_config import _get_favicon_string

    seen = {}
    real = streamlit.set_page_config
    monkeypatch.setattr(streamlit, "set_page_config", lambda **kw: (seen.update(kw), real(**kw))[1])
    open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    icon = seen["page_icon"]  # the last call: this page's
    assert os.path.isfile(icon)
    assert _get_favicon_string(icon).startswith("data:image/svg+xml;base64,")  # inline: nothing to fetch


def test_calibrate_button_runs_in_the_background_and_later_figures_use_it(monkeypatch, tmp_path):
    """The button starts the calibration (here a stand-in command that stores a calibration as `core calibrate`
    does, after a pause); while it runs the button is disabled with its reason; afterwards the page shows the
    stored rates, and the host's CPU speed figures carry its label."""
    import core.speed.calibrate_job as job_module
    from core.speed import calibration
    from core.speed.calibrate_job import active_calibration

    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path / "cache"))
    stand_in = (
        "import json, time; time.sleep(2); from core.speed import calibration as c; "
        "cal = c.Calibration(c.host_key(), '2026-01-01T00:00:00Z', 'stand-in', 9.5, 2, (('Q4_0', 3.0, 7.0),), "
        "single=(('Q4_0', 5.0, 7.5),), ram_thread_gb_s=8.0); "
        "print(json.dumps(cal.record() | {'stored': str(c.store(cal)), 'warning': None}))"
    )
    monkeypatch.setattr(job_module, "calibrate_command", lambda threads=None: [sys.executable, "-c", stand_in])
    at = open_page(monkeypatch, tmp_path, tiny_raw("llama", layers=2))
    assert any("not been calibrated" in c.value for c in at.caption)
    button(at, "Calibrate this machine").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    job = active_calibration()
    assert job is not None, "the page should have started a calibration"
    assert button(at, "Calibrate this machine").disabled
    assert any("Disabled while a calibration is running" in c.value for c in at.caption)
    assert job.wait(60).status == "ok"
    at.run()
    assert not button(at, "Calibrate this machine").disabled
    assert any("Later speed figures on this host use it" in s.value for s in at.success)
    assert any("RAM 9.5 GB/s (8.0 with one thread), 2 threads" in s.value for s in at.success)
    stored = calibration.load()
    assert stored is not None and stored.rate("Q4_0", prefill=True) == 7.0
    # both thread counts' rates, as stored
    table = next(d.value for d in at.dataframe if "format" in d.value.columns).set_index("format")
    assert table.loc["Q4_0", "decode GFLOP/s per thread"] == 3.0
    assert table.loc["Q4_0, 1 thread", "decode GFLOP/s per thread"] == 5.0


def test_a_calibration_another_process_refuses_is_a_warning_not_an_error(monkeypatch, tmp_path):
    """`python -m core calibrate` refuses while a probe or calibration of another process measures the host
    (core.files.measuring): nothing was timed, so the page says what runs, as a warning, and stores nothing."""
    import core.speed.calibrate_job as job_module
    from core.speed import calibration
    from core.speed.calibrate_job import active_calibration

    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path / "cache"))
    said = "busy: a probe of x (probe process pid 7) is measuring this host, and …; wait for it to end, or stop it"
    refusal = f"import sys, time; time.sleep(1); sys.exit({'error: ' + said!r})"  # as the command says it, exit 1
    monkeypatch.setattr(job_module, "calibrate_command", lambda threads=None: [sys.executable, "-c", refusal])
    at = open_page(monkeypatch, tmp_path, tiny_raw("llama", layers=2))
    button(at, "Calibrate this machine").click()
    at.run()
    job = active_calibration()
    assert job is not None and job.wait(60).status == "busy"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [w.value for w in at.warning if "Not calibrated" in w.value] == [f"Not calibrated: {said}."]
    assert not any("Calibration" in e.value for e in at.error) and calibration.load() is None


@pytest.mark.parametrize(
    ("contexts", "says"),
    [("99999999k", "is above the model's limit of 512 tokens"), (" , ", "give at least one token count")],
)
def test_contexts_past_the_limit_or_none_are_refused_before_any_process_starts(monkeypatch, tmp_path, contexts, says):
    """A context past the model's limit would have the child allocate its cache (a 100M-token one is terabytes and
    ended in the child's traceback); none at all was once reported as an empty Python tuple."""
    at = open_page(monkeypatch, tmp_path, tiny_raw("qwen3_5_text"))  # max_position_embeddings 512
    next(t for t in at.text_input if t.label == "Contexts").input(contexts)
    button(at, "Run probe").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert active_job() is None
    assert any(says in e.value for e in at.error), [e.value for e in at.error]
    assert not any("()" in e.value for e in at.error)
