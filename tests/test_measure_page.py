"""The Measure live page under AppTest: a real CPU probe in a child process, end to end."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT
from tests.tiny_configs import tiny_raw
from ui.state import pack_config

PAGE = "pages/2_measure_live.py"


def open_page(monkeypatch, tmp_path, raw):
    monkeypatch.setenv("KVSCOPE_PROBE_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["config"] = pack_config(raw)
    at.query_params["engine"] = "transformers"
    at.run()
    return at.switch_page(PAGE).run()


def test_cpu_probe_end_to_end_measures_what_kvscope_predicts(monkeypatch, tmp_path):
    at = open_page(monkeypatch, tmp_path, tiny_raw("qwen3_5_text"))
    assert not at.exception
    next(t for t in at.text_input if t.label == "Contexts").input("12, 40")
    next(s for s in at.selectbox if s.label == "Device").set_value("cpu")
    next(b for b in at.button if b.label == "Run probe").click()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    table = at.dataframe[0].value
    assert list(table["context"]) == ["12", "40"]
    assert list(table["measured ÷ predicted"]) == [1.0, 1.0]
    assert (table["measured (MiB)"] > 0).all()
    records = [json.loads(line) for line in (tmp_path / "probes.jsonl").read_text().splitlines()]
    assert len(records) == 1 and records[0]["status"] == "ok"
    assert [m["measured_cache_bytes"] for m in records[0]["measured"]] == [
        p["cache_bytes"] for p in records[0]["predicted"]
    ]


def test_past_runs_skip_a_corrupted_line_with_a_warning(monkeypatch, tmp_path):
    good = {"time": "2026-11-29T00:00:00", "model": "m", "status": "ok", "measured": [{"context": 16, "ratio": 1.0}]}
    (tmp_path / "probes.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    at = open_page(monkeypatch, tmp_path, tiny_raw("llama"))
    assert not at.exception
    assert any("line 2" in w.value or "skipped" in w.value for w in at.warning), [w.value for w in at.warning]
    assert list(at.dataframe[0].value["model"]) == ["m"]
