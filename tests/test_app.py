"""The explorer under Streamlit's AppTest: every page renders, shows core's numbers, and round-trips the URL."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from core.engines import engine_named
from core.fit import Setup, context_limit, fit, table_contexts
from core.memory.gpus import Card, card_named
from core.model.loading import load_model
from core.report import max_context_text, requests_text
from core.units import format_bytes, format_tokens
from tests.conftest import ROOT
from tests.rendered import shown
from tests.tiny_configs import tiny_raw
from ui.layout import PAINTED
from ui.state import DEFAULTS, Inputs, from_query, pack_config, to_query

APP = str(ROOT / "app.py")
PAGES = [
    "app.py",
    "pages/1_hybrid_vs_dense.py",
    "pages/2_measure_live.py",
    "pages/3_fact_check.py",
    "pages/4_finders.py",
    "pages/5_ollama.py",
    "pages/6_cluster.py",
]


def app(params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    for key, value in (params or {}).items():
        at.query_params[key] = value
    return at.run()


def opened(at: AppTest, key: str) -> AppTest:
    """Open a lazy expander (ui.layout.opened) as a click does: its state set, the page rerun."""
    at.session_state[key] = True
    return at.run()


def open_page(page: str, params: dict[str, str], timeout: int = 180) -> AppTest:
    """A link to `page` as a browser opens it: the app reads the link, then the page runs; no exception."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    at.query_params.update(params)
    at.run()
    at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def expected(inputs: Inputs):
    model = load_model(inputs.model)
    card = Card.custom(inputs.gib) if inputs.card == "custom" else card_named(inputs.card)
    setup = Setup(
        model=model, engine=engine_named(inputs.engine), card=card, weights=inputs.weights, kv_dtype=inputs.kv
    )
    limit = context_limit(setup)
    result = fit(setup, sorted(set(table_contexts(limit)) | {min(inputs.ctx, limit)}))
    return result, next(r for r in result.rows if r.context == min(inputs.ctx, limit))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_exception(page):
    at = app()
    if page != PAGES[0]:
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title


def test_default_view_shows_cores_numbers():
    at = app()
    result, row = expected(DEFAULTS)
    shown = metrics(at)
    assert shown["Max context, one sequence"] == format_tokens(result.max_context)
    assert shown["Cache at this context"] == format_bytes(row.cache_bytes)
    assert shown["Fits?"] == ("yes" if row.fits else "no")
    table = at.dataframe[0].value
    assert list(table["context"]) == [format_tokens(r.context) for r in result.rows]


def figures(at: AppTest) -> dict[str, str]:
    """The headline figures of a session's first run: markdown, the label small and the value a heading
    (ui.figures.figure_row)."""
    drawn = [re.fullmatch(r":small\[(.+)\]\n\n## (.+)", m.value) for m in at.markdown]
    return {match[1]: match[2] for match in drawn if match}


def first_run(params: dict[str, str]) -> AppTest:
    """A session's first run, before its browser has reported it drawn (tests/conftest.py starts AppTests after)."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state[PAINTED] = False
    at.query_params.update(params)
    return at.run()


def test_the_inputs_and_the_chart_come_after_the_results_reach_the_browser():
    """Issue 20 item 13: a session's first run draws the verdict, the metrics and the table of the link's inputs, and
    neither the sidebar's inputs and page links nor the chart; once the browser reports that run drawn (the
    component's state), the page reruns with them, the inputs holding the link's values."""
    inputs = Inputs(model="Qwen/Qwen3-8B", card="GeForce RTX 4090 24GB", engine="vllm", kv="fp8", ctx=65_536)
    at = first_run(to_query(inputs))
    result, row = expected(inputs)
    assert not at.exception
    # the figures as markdown: no st.metric (its code, fetched by a fresh tab once a metric arrives), no downloads
    assert figures(at) == {
        "Fits?": "yes" if row.fits else "no",
        "Max context, one sequence": max_context_text(result),
        f"Requests at {format_tokens(row.context)}": requests_text(result, row),
        "Cache at this context": format_bytes(row.cache_bytes),
    }
    assert not at.metric and not at.get("download_button")
    # the table as markdown: no data grid (pyarrow, numpy, the grid's code) before the first paint
    (table,) = [m.value for m in at.markdown if m.value.startswith("| context |")]
    header, _, *lines = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()]
    assert [line[0] for line in lines] == [format_tokens(r.context) for r in result.rows]
    cache = header.index("cache (GiB)")
    shown_gib = [float(line[cache]) for line in lines]  # to 3 places (tests/test_table.py: how it rounds)
    assert all(len(line[cache].split(".")[1]) == 3 for line in lines)
    assert shown_gib == pytest.approx([r.cache_bytes / 2**30 for r in result.rows], abs=0.0005 + 1e-9)
    assert lines[[r.context for r in result.rows].index(row.context)][1] == ("yes" if row.fits else "no")
    assert not at.dataframe
    assert not at.sidebar.selectbox and not at.sidebar.text_input and not at.get("plotly_chart")
    assert not at.get("page_link")  # a link clicked before the rerun below would lose to it
    assert "Loading the inputs…" in [c.value for c in at.sidebar.caption]
    assert "Drawing the chart…" in [c.value for c in at.caption]
    assert from_query(dict(at.query_params))[0] == inputs  # the link is whole before the inputs are drawn

    at.session_state["kv_painted"] = {"painted": True}  # what the component sends from the browser
    at.run()
    assert not at.exception and metrics(at) == figures(first_run(to_query(inputs)))
    assert not figures(at) and len(at.get("download_button")) == 2
    shown = {w.key: w.value for w in [*at.sidebar.selectbox, *at.sidebar.text_input]}
    assert shown["in_model"] == inputs.model and shown["in_card"] == inputs.card and shown["in_kv"] == "fp8"
    assert shown["in_engine"] == "vllm" and shown["in_ctx_text"] == "64K"
    assert "Loading the inputs…" not in [c.value for c in at.sidebar.caption]
    assert len(at.get("page_link")) == len(PAGES)
    assert list(at.dataframe[0].value["context"]) == [format_tokens(r.context) for r in result.rows]
    assert not [m for m in at.markdown if m.value.startswith("| context |")]
    (chart,) = at.get("plotly_chart")
    figure = json.loads(chart.proto.spec)
    assert [s["y0"] for s in figure["layout"]["shapes"]] == [pytest.approx(result.usable_bytes / 2**30)]
    assert {len(bar["x"]) for bar in figure["data"]} == {len(result.rows)}  # one bar per row of the table
    at.run()  # the reporter is gone; the inputs stay
    assert at.sidebar.selectbox and not at.exception


def test_driving_widgets_changes_the_answer_to_cores():
    at = app()
    at.selectbox(key="in_card").set_value("GeForce RTX 4090 24GB")
    at.selectbox(key="in_engine").set_value("vllm")
    at.selectbox(key="in_weights").set_value("bf16")
    at.text_input(key="in_ctx_text").input("16k")
    at.run()
    assert not at.exception
    inputs = Inputs(card="GeForce RTX 4090 24GB", engine="vllm", weights="bf16", ctx=16384)
    result, row = expected(inputs)
    shown = metrics(at)
    assert shown["Requests at 16K"] == f"{math.floor(row.max_concurrency * 100) / 100:,.2f}"  # cut, not rounded up
    assert shown["Max context, one sequence"] == format_tokens(result.max_context)
    assert at.query_params["card"] == "GeForce RTX 4090 24GB"
    assert at.query_params["ctx"] == "16K"


def test_eight_bit_kv_halves_the_attention_cache():
    at = app({"model": "Qwen/Qwen3-8B", "engine": "vllm", "weights": "bf16", "card": "H100", "ctx": "32k"})
    before = metrics(at)["Cache at this context"]
    at.toggle(key="eight_bit").set_value(True).run()
    after = metrics(at)["Cache at this context"]
    assert at.selectbox(key="in_kv").value == "fp8"
    model = load_model("Qwen/Qwen3-8B")
    vllm = engine_named("vllm")
    assert before == format_bytes(vllm.account(model, 32768).total)
    assert after == format_bytes(vllm.account(model, 32768, kv_dtype="fp8").total)
    assert vllm.account(model, 32768, kv_dtype="fp8").total * 2 == vllm.account(model, 32768).total


def test_url_round_trip_restores_every_widget():
    params = {
        "model": "openai/gpt-oss-20b",
        "card": "H100 80GB SXM5",
        "gpus": "2",
        "weights": "mxfp4",
        "engine": "vllm",
        "kv": "fp8",
        "ctx": "64K",
        "cmp": "meta-llama/Llama-3.1-8B-Instruct",
    }
    at = app(params)
    assert not at.warning, [w.value for w in at.warning]
    assert at.selectbox(key="in_model").value == "openai/gpt-oss-20b"
    assert at.selectbox(key="in_card").value == "H100 80GB SXM5"
    assert at.number_input(key="in_gpus").value == 2
    assert at.selectbox(key="in_engine").value == "vllm"
    assert at.selectbox(key="in_kv").value == "fp8"
    assert at.text_input(key="in_ctx_text").value == "64K"
    assert dict(at.query_params.items()) == params


def test_tampered_link_opens_with_defaults_and_names_what_was_ignored():
    at = app({"model": "Qwen/Qwen3-8B", "engine": "tgi", "gib": "-4", "ctx": "lots", "evil": "1"})
    warning = " ".join(w.value for w in at.warning)
    for name in ("engine", "gib", "evil"):
        assert name in warning
    # the context box is text: it holds 'lots' as sent, and its error stands in place of the results
    assert any("Context: cannot read 'lots'" in e.value for e in at.error) and not at.metric
    assert at.selectbox(key="in_engine").value == DEFAULTS.engine
    assert at.selectbox(key="in_model").value == "Qwen/Qwen3-8B"
    assert not at.exception


def test_a_link_naming_an_unknown_preset_says_so_instead_of_showing_the_default_silently():
    at = app({"model": "Qwen/Qwen3-14B", "source": "Preset"})  # repo-shaped, but not bundled: the Hub is not asked
    (warning,) = [shown(w.value) for w in at.warning if "link parameters were ignored" in w.value]
    assert "model='Qwen/Qwen3-14B' (not a bundled preset" in warning and "source=Hub" in warning
    assert at.selectbox(key="in_model").value == DEFAULTS.model
    assert from_query({"model": "Qwen/Qwen3-8B", "source": "Preset"})[1] == []  # a bundled one stays as it is
    assert not at.exception


def test_a_listed_cards_link_figures_are_named_as_ignored_and_not_carried_on():
    """gbs/tflops/gib size a custom card; with a listed card they did nothing, said nothing and stayed in the link
    (the CLI applies --gpu-gbs to a named card, so the two surfaces gave different speeds without a word)."""
    at = app({"model": "Qwen/Qwen3-8B", "card": "RTX 4090", "gbs": "500", "tflops": "100", "ctx": "4k"})
    (warning,) = [shown(w.value) for w in at.warning if "link parameters were ignored" in w.value]
    assert "gbs=500 (card=GeForce RTX 4090 24GB has its own figures" in warning and "tflops=100" in warning
    assert "gbs" not in dict(at.query_params.items()) and not at.exception
    inputs, ignored = from_query({"card": "custom", "gib": "48", "gbs": "500"})  # a custom card keeps them
    assert (inputs.gib, inputs.gbs, ignored) == (48.0, 500.0, [])
    assert "gbs" not in to_query(replace(inputs, card="L4 24GB"))  # left over from the custom card: not sent


def test_a_config_in_a_link_that_names_another_source_is_named_as_ignored():
    packed = pack_config(tiny_raw("llama"))
    inputs, ignored = from_query({"source": "Preset", "model": "Qwen/Qwen3-8B", "config": packed})
    assert inputs.config == "" and ignored == [
        "config (a shared config.json is read with source=Upload; the link says Preset)"
    ]
    alone, ignored = from_query({"config": packed})  # a hand-made link with the config alone: its upload
    assert (alone.source, alone.config, ignored) == ("Upload", packed, [])


def test_unknown_hub_model_offline_shows_a_message_and_the_default():
    at = app({"model": "nobody/not-a-model"})
    assert any("nobody/not-a-model" in e.value for e in at.error)
    assert not at.exception


def test_a_model_that_cannot_be_read_is_asked_for_once_a_minute_not_again_by_the_paints_rerun(monkeypatch):
    """A Hub id that cannot be reached costs its timeout (up to 5 s offline); st.cache_data keeps no exception, so
    the paint's rerun and every other visitor of the link paid it again. The failure is remembered for a minute."""
    import secrets

    import ui.inputs

    asked: list[str] = []
    real = ui.inputs.load_raw
    monkeypatch.setattr(ui.inputs, "load_raw", lambda source, **kw: (asked.append(source), real(source, **kw))[1])
    name = f"nobody/not-a-model-{secrets.token_hex(4)}"  # in no cache from an earlier test
    at = first_run({"model": name})
    assert any(name in e.value for e in at.error) and not at.metric and not at.exception
    assert asked == [name]
    at.session_state["kv_painted"] = {"painted": True}  # the browser's report: the rerun with the inputs
    at.run()
    assert any(name in e.value for e in at.error) and not at.metric and at.sidebar.text_input
    assert asked == [name]
    assert any(name in e.value for e in first_run({"model": name}).error)  # another visitor, within the minute
    assert asked == [name]
    assert any("other" in e.value for e in first_run({"model": "nobody/other"}).error)
    assert asked == [name, "nobody/other"]  # the probe sees a new name asked for


def test_uploaded_config_travels_in_the_link():
    raw = json.loads((ROOT / "core" / "model" / "presets" / "Qwen__Qwen3-8B.json").read_text())
    at = app({"config": pack_config(raw), "engine": "transformers", "weights": "bf16", "card": "H100"})
    assert not at.exception and not at.warning
    result, _ = expected(Inputs(engine="transformers", weights="bf16", card="H100 80GB SXM5", model="Qwen/Qwen3-8B"))
    assert metrics(at)["Max context, one sequence"] == format_tokens(result.max_context)


def test_query_state_round_trip_is_pure():
    inputs = Inputs(model="Qwen/Qwen3-8B", card="L4 24GB", engine="vllm", kv="fp8", ctx=131072, layers=12)
    again, ignored = from_query(to_query(inputs))
    assert again == inputs and ignored == []


def test_pages_other_than_the_probe_never_import_torch():
    script = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({APP!r}, default_timeout=180).run()
at.switch_page("pages/1_hybrid_vs_dense.py").run()
assert not at.exception, at.exception
print("torch" in sys.modules, "transformers" in sys.modules)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-2:] == ["False", "False"]


def test_llamacpp_gpu_layers_input_reaches_the_solver():
    at = app({"model": "Qwen/Qwen3.5-9B", "engine": "llama.cpp", "ngl": "16", "gib": "4"})
    assert at.number_input(key="in_ngl").value == 16
    inputs = Inputs(model="Qwen/Qwen3.5-9B", engine="llama.cpp", gib=4.0)
    model = load_model(inputs.model)
    setup = Setup(
        model=model, engine=engine_named("llama.cpp"), card=Card.custom(4), weights=inputs.weights, gpu_layers=16
    )
    row = fit(setup, [32768]).rows[0]
    assert metrics(at)["Cache at this context"] == format_bytes(row.cache_bytes)
    assert any("-ngl 16: the last 15 of 32 layers and the output layer" in i.value for i in at.info)


def test_hub_mode_offline_falls_back_to_the_bundled_copy_and_says_so():
    at = app({"model": "Qwen/Qwen3-8B"})
    at.radio(key="in_source").set_value("Hub").run()
    assert not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "bundled preset" in warning and "Hub cannot be reached" in warning
    result, _ = expected(Inputs(model="Qwen/Qwen3-8B"))
    assert metrics(at)["Max context, one sequence"] == format_tokens(result.max_context)


def test_every_layer_in_ram_is_not_shown_as_a_fixed_state_model():
    """-ngl 0 on a dense model leaves the GPU no cache: its table still runs every context (the cache grows, in
    system RAM), and the requests say where the cache is, not 'unlimited' as for a fixed-state model."""
    at = app({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4090 24GB", "ngl": "0"})
    assert not at.exception
    assert metrics(at)["Requests at 32K"] == "— (cache in system RAM)"
    assert not any("fixed state that does not grow" in c.value for c in at.caption)
    assert len(at.dataframe[0].value) > 1
    mamba = app({"model": "state-spaces/mamba2-2.7b", "card": "GeForce RTX 4090 24GB", "engine": "vllm"})
    assert any("fixed state that does not grow" in c.value for c in mamba.caption)  # a real one still says so
