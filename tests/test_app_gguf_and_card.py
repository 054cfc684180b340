"""The app does what the command line does: a GGUF named by its Hub name (org/repo:QUANT) is sized from its header,
and a custom card given by its figures (memory, bandwidth, dense 16-bit peak) is timed by them. The Hub is
tests/test_gguf_hub.py's local fake, which huggingface_hub itself talks to."""

from __future__ import annotations

import pytest

from core.engines import engine_named
from core.fit import Setup, context_limit, fit, table_contexts
from core.memory.gpus import Card
from core.model.loading import load_model
from core.speed import Hardware
from core.speed.calibration import load as host_calibration
from core.speed.report import speed_or_none
from core.units import GIB, format_tokens
from tests import test_gguf_hub
from tests.rendered import shown
from tests.test_app import app
from tests.test_gguf_hub import MIX, SHA, _expected_table, offline, write_gguf
from ui import inputs as ui_inputs
from ui.state import DEFAULTS, from_query, to_query

REPO = "org/tiny-GGUF"
FILE = "Tiny-8B-UD-Q4_K_XL.gguf"
NAME = f"{REPO}:UD-Q4_K_XL"
hub = test_gguf_hub.hub  # the fake Hub fixture, with huggingface_hub pointed at it


@pytest.fixture
def served(hub, tmp_path):
    """The fake Hub serving one GGUF (a UD-like mix whose base model is Qwen/Qwen3-8B); the app's caches empty, so
    nothing another test read answers here."""
    path = write_gguf(tmp_path / FILE)[0]
    hub.add(REPO, [(FILE, path)])
    ui_inputs._gguf_weights.clear()
    ui_inputs._spec.clear()
    yield path
    ui_inputs._gguf_weights.clear()
    ui_inputs._spec.clear()


def _frame(at):
    return at.dataframe[0].value.data if hasattr(at.dataframe[0].value, "data") else at.dataframe[0].value


def _errors(at) -> str:
    return "\n".join(e.value for e in at.error)


def test_a_gguf_name_sizes_the_weights_from_its_header(served, hub):
    at = app({"model": NAME, "source": "Hub"})
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, _errors(at)
    table = _expected_table([served])  # gguf-py's own reader of the whole file
    on_gpu = sum(n for _, n in table.values()) - table["token_embd.weight"][1]  # llama.cpp keeps it in RAM
    shown = _frame(at)["weights (GiB)"]
    assert list(shown) == [on_gpu / GIB] * len(shown)
    by_format = Setup(model=load_model("Qwen/Qwen3-8B"), engine=engine_named("llama.cpp"), card=Card.custom(8))
    assert fit(by_format, [4096]).rows[0].weights_bytes / GIB != shown.iloc[0], "sized by the selectbox's format"
    # the selectbox gives way to the file, its commit and its bytes per ggml type
    assert not [s for s in at.sidebar.selectbox if s.label == "Weights"]
    (caption,) = [c.value for c in at.sidebar.caption if "GGUF's header" in c.value]
    assert FILE in caption and REPO in caption and SHA[:8] in caption
    per_type: dict[str, int] = {}
    for kind, n in table.values():
        per_type[kind] = per_type.get(kind, 0) + n
    assert set(per_type) == {k.name for _, k in MIX}
    for kind in per_type:
        assert f"{kind} " in caption, kind
    assert any("Config: GGUF" in c.value and "Qwen/Qwen3-8B" in c.value for c in at.sidebar.caption)
    # the link names the GGUF, and opening it gives the same figures
    assert at.query_params["model"] == [NAME] or at.query_params["model"] == NAME
    inputs, ignored = from_query({k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()})
    assert not ignored and inputs.model == NAME and inputs.source == "Hub"
    again = app(to_query(inputs))
    assert not again.error and list(_frame(again)["weights (GiB)"]) == list(shown)
    assert hub.sent[FILE] <= served.stat().st_size  # the header (this small file is all header and a little data)


def test_hf_co_prefix_is_the_same_gguf(served):
    at = app({"model": f"hf.co/{NAME}", "source": "Hub"})
    assert not at.error, _errors(at)
    assert any(FILE in c.value for c in at.sidebar.caption)


def test_offline_without_a_cache_shows_the_message_and_no_figures(served, monkeypatch):
    offline(monkeypatch)
    at = app({"model": NAME, "source": "Hub"})
    assert not at.exception
    assert "HF_HUB_OFFLINE is set" in _errors(at) and NAME in _errors(at)
    assert not at.metric and not at.dataframe


def test_an_unknown_quant_tag_lists_the_files(served):
    at = app({"model": f"{REPO}:Q2_K", "source": "Hub"})
    assert "no GGUF file for 'Q2_K'" in _errors(at) and "UD-Q4_K_XL" in _errors(at)
    assert not at.metric and not at.dataframe


def test_a_gguf_on_another_engine_is_refused(served):
    at = app({"model": NAME, "source": "Hub", "engine": "vllm", "kv": "auto"})
    assert "a GGUF runs on llama.cpp or Ollama" in _errors(at)
    assert not at.metric and not at.dataframe


def test_a_malformed_gguf_name_is_explained(served):
    at = app()
    at.radio(key="in_source").set_value("Hub").run()
    at.text_input(key="in_model").input("org/repo:Q4:K").run()
    assert "not a Hub GGUF name" in _errors(at) and not at.metric


def _expected_speed(gib: float, gbs: float | None, tflops: float | None):
    setup = Setup(
        model=load_model(DEFAULTS.model),
        engine=engine_named(DEFAULTS.engine),
        card=Card.custom(gib, gbs, tflops),
        weights=DEFAULTS.weights,
    )
    limit = context_limit(setup)
    result = fit(setup, sorted(set(table_contexts(limit)) | {min(DEFAULTS.ctx, limit)}))
    return speed_or_none(result, Hardware(ram_gb_s=0.0, threads=8, calibration=host_calibration()))


def test_a_custom_card_with_figures_shows_cores_speed():
    at = app({"gib": "24", "gbs": "936", "tflops": "71"})
    assert not at.exception and not at.error and not at.warning, _errors(at)
    assert at.number_input(key="in_gbs").value == 936 and at.number_input(key="in_tflops").value == 71
    rows, why = _expected_speed(24, 936, 71)
    assert rows and not why
    frame = _frame(at)
    by_context = {format_tokens(r["context"]): r["decode_tok_s"] for r in rows}
    shown = dict(zip(frame["context"], frame["decode tok/s"], strict=True))
    assert len(shown) > 3 and shown == by_context
    assert all(v > 0 for v in shown.values())
    assert at.query_params["gbs"] in ("936", ["936"]) and at.query_params["tflops"] in ("71", ["71"])


def test_a_custom_card_without_figures_says_which_to_give():
    at = app({"gib": "24", "gbs": "936"})
    assert at.number_input(key="in_tflops").value is None
    rows, why = _expected_speed(24, 936, None)
    assert rows is None and "dense 16-bit peak" in why
    assert "decode tok/s" not in _frame(at).columns
    assert any("No speed:" in c.value and "dense 16-bit peak" in c.value for c in at.caption)


def test_the_figures_typed_in_the_sidebar_travel_in_the_link():
    at = app({"gib": "24"})
    at.number_input(key="in_gbs").set_value(1008.0).run()
    at.number_input(key="in_tflops").set_value(165.2).run()
    assert not at.error, _errors(at)
    inputs, ignored = from_query({k: v[0] if isinstance(v, list) else v for k, v in at.query_params.items()})
    assert not ignored and (inputs.gbs, inputs.tflops) == (1008.0, 165.2)
    assert "decode tok/s" in _frame(at).columns


@pytest.mark.parametrize(("key", "value"), [("gbs", "0"), ("gbs", "-5"), ("tflops", "nan"), ("tflops", "1e9")])
def test_link_figures_are_bounded(key, value):
    inputs, ignored = from_query({"gib": "24", key: value})
    assert getattr(inputs, key) is None and any(i.startswith(f"{key}=") for i in ignored)
    at = app({"gib": "24", key: value})
    (warning,) = [shown(w.value) for w in at.warning if "link parameters were ignored" in w.value]
    assert f"{key}=" in warning
    assert at.number_input(key=f"in_{key}").value is None
