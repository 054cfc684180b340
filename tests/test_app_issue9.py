"""Issue 9, the explorer part: what a new user hit in the browser, each as a check that failed before the fix.

Expected figures come from core (or from the page itself after a reload through its own link), never from
literals copied out of the app."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from urllib.parse import parse_qsl, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from core.compare import layout
from core.engines import configured
from core.fit import Setup, context_limit, fit, table_contexts
from core.memory.gpus import Card, card_named
from core.model.loading import load_model
from core.report import engine_format_warning, verdict
from core.units import format_tokens
from tests.test_app import APP, app, metrics, opened
from ui.layout import PAINTED
from ui.state import DEFAULTS, Inputs, from_query, share_query

HYBRID = "pages/1_hybrid_vs_dense.py"


def share_link(at: AppTest) -> str:
    """The "Share this view" box on every page, opened as a person opens it (it draws only while open)."""
    (code,) = [c for c in opened(at, "kv_share").sidebar.code]
    return code.value


def through_chat(link: str) -> dict[str, str]:
    """Paste a link into a chat message: whitespace ends it; what is left is parsed as a browser would."""
    message = f"look at this {link} and tell me"
    token = message.split()[3]
    return dict(parse_qsl(urlsplit(token).query))


def reopen(link: str, page: str | None = None) -> AppTest:
    params = through_chat(link)
    at = app(params)
    if page:
        at.switch_page(page).run()
    return at


def main_errors(at: AppTest) -> list[str]:
    return [e.value for e in at.main.error]


def charts(at: AppTest) -> list[dict]:
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


# --- 4. the share link survives a chat -------------------------------------------------------------------------
def test_share_link_is_encoded_and_survives_a_chat():
    sender = app({"card": "GeForce RTX 4060 8GB", "engine": "vllm", "weights": "awq", "ctx": "16K"})
    link = share_link(sender)
    assert " " not in link
    inputs, ignored = from_query(through_chat(link))
    assert ignored == []
    assert inputs == Inputs(card="GeForce RTX 4060 8GB", engine="vllm", weights="awq", ctx=16384)
    receiver = reopen(link)
    assert metrics(receiver) == metrics(sender)


def test_every_value_round_trips_through_the_encoded_query():
    inputs = Inputs(model="Qwen/Qwen3-8B", card="GeForce RTX 4060 Ti 8GB", gpus=2, engine="vllm", kv="fp8",
                    ctx=64000, util=0.875, pat="LLLF", cmp="Qwen/Qwen3-8B,google/gemma-2-9b-it")  # fmt: skip
    query = share_query(inputs)
    assert not set(query) & set(" ,/")
    assert from_query(dict(parse_qsl(query))) == (inputs, [])
    odd = replace(DEFAULTS, gib=1.1 + 2.2)  # a custom card's float that %g would round (3.3000000000000003)
    assert from_query(dict(parse_qsl(share_query(odd)))) == (odd, [])


# --- 5. an invalid what-if edit: the receiver sees what the sender saw -------------------------------------------
def test_link_with_an_invalid_edit_shows_the_receiver_the_same_view():
    sender = opened(app(), "kv_whatif")
    sender.number_input(key="in_layers").set_value(18)
    sender.text_input(key="in_pat").input("XYZ")
    sender.run()
    assert any("cannot be applied" in e for e in main_errors(sender))
    assert not sender.metric  # no results that ignore the edit
    receiver = reopen(share_link(sender))
    assert main_errors(receiver) == main_errors(sender)
    assert not receiver.metric
    assert receiver.text_input(key="in_pat").value == "XYZ"
    assert receiver.number_input(key="in_layers").value == 18


def test_clearing_the_edit_brings_the_results_back():
    at = app({"layers": "18", "pat": "XYZ"})
    at.button[0].click().run()
    assert not main_errors(at) and metrics(at)
    assert "pat" not in at.query_params and "layers" not in at.query_params


# --- 6. comparators on the hybrid page ----------------------------------------------------------------------------
def test_adding_two_comparators_in_a_row_keeps_both_and_the_link_follows():
    at = app()
    at.switch_page(HYBRID).run()
    start = list(at.multiselect(key="cmp_sel").value)
    for name in ("nvidia/Nemotron-H-8B-Base-8K", "google/gemma-3-4b-it"):
        at.multiselect(key="cmp_sel").select(name).run()
        chosen = [*start, name] if name.startswith("nvidia") else [*start, "nvidia/Nemotron-H-8B-Base-8K", name]
        assert at.multiselect(key="cmp_sel").value == chosen
        assert at.query_params["cmp"] == ",".join(chosen)  # the address bar matches on this very run
        traces = {t["name"] for t in charts(at)[0]["data"]}
        assert set(chosen) <= traces
    assert reopen(share_link(at), HYBRID).multiselect(key="cmp_sel").value == chosen


@pytest.mark.parametrize(
    ("page", "field", "key", "value"),
    [
        (HYBRID, "cmp", "cmp_sel", ["Qwen/Qwen3-8B"]),
        ("pages/5_ollama.py", "omodels", "ol_models", ["Qwen/Qwen3-8B"]),
        ("pages/5_ollama.py", "ocards", "ol_cards", ["GeForce RTX 4090 24GB"]),
    ],
)
def test_a_list_box_takes_clicks_only_once_the_first_run_is_drawn(page, field, key, value):
    """A session's first run draws the page's multiselects greyed out; the paint's rerun (ui.layout.wait_for_paint)
    enables them, with the link's lists. A click in between landed while the box was redrawn and chose other models
    (tests/e2e/test_browser.py::test_a_comparator_clicked_at_once_is_the_one_added)."""
    at = AppTest.from_file(APP, default_timeout=180)
    at.session_state[PAINTED] = False
    at.query_params.update({"model": "Qwen/Qwen3.5-9B", field: ",".join(value)})
    at.switch_page(page).run()
    first = at.multiselect(key=key)
    assert first.disabled and first.value == value
    at.session_state[PAINTED] = True
    at.run()
    assert not at.exception
    drawn = at.multiselect(key=key)
    assert not drawn.disabled and drawn.value == value


def test_every_page_has_the_share_box():
    at = app({"engine": "vllm", "weights": "bf16"})
    for page in ("app.py", HYBRID, "pages/2_measure_live.py"):
        at.switch_page(page).run()
        assert not at.exception, page
        assert from_query(through_chat(share_link(at)))[0].engine == "vllm", page


# --- 7. invalid input replaces the results ------------------------------------------------------------------------
def test_unreadable_context_replaces_the_results_with_the_error():
    at = app()
    at.text_input(key="in_ctx_text").input("1M").run()
    assert metrics(at)
    at.text_input(key="in_ctx_text").input("abc").run()
    assert any("'abc'" in e for e in main_errors(at))
    assert not at.metric and not at.dataframe


def test_context_box_takes_the_apps_own_number_format():
    at = app({"model": "meta-llama/Llama-3.1-8B-Instruct", "card": "H100 80GB SXM5"})
    at.text_input(key="in_ctx_text").input(format_tokens(64000)).run()  # "64,000"
    assert not main_errors(at)
    assert "Requests at 64,000" in metrics(at)
    assert at.query_params["ctx"] == "64000"


def test_broken_uploaded_json_replaces_the_results_with_the_error():
    at = app()
    assert metrics(at)
    at.radio(key="in_source").set_value("Upload").run()
    at.text_area[0].input('{"model_type": "llama", ').run()
    assert any("config.json" in e for e in main_errors(at))
    assert not at.metric


# --- 8. engine switches keep 8-bit; formats an engine cannot run warn ---------------------------------------------
def test_switching_engine_keeps_the_eight_bit_cache():
    at = app({"kv": "q8_0"})
    assert at.toggle(key="eight_bit").value
    at.selectbox(key="in_engine").set_value("vllm").run()
    assert at.selectbox(key="in_kv").value == "fp8" and at.toggle(key="eight_bit").value
    at.selectbox(key="in_engine").set_value("llama.cpp").run()
    assert at.selectbox(key="in_kv").value == "q8_0"


@pytest.mark.parametrize(
    ("engine", "weights", "warns"),
    [("vllm", "q4_k_m", True), ("transformers", "q4_k_m", True), ("llama.cpp", "awq", True),
     ("vllm", "awq", False), ("llama.cpp", "q4_k_m", False), ("transformers", "bf16", False)],
)  # fmt: skip
def test_engine_and_format_pairs_the_engine_cannot_run_warn(engine, weights, warns):
    at = app({"engine": engine, "weights": weights, "model": "Qwen/Qwen3-8B"})
    shown = [w.value for w in at.warning if weights in w.value]
    assert bool(shown) == warns
    assert bool(engine_format_warning(configured(engine), weights)) == warns


# --- 9 and 13. pure state-space models ----------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["state-spaces/mamba2-2.7b", "tiiuae/falcon-mamba-7b-pre-decay"])
def test_pure_ssm_on_the_hybrid_page_draws_instead_of_crashing(model):
    at = app({"model": model, "cmp": "Qwen/Qwen3-8B"})
    at.switch_page(HYBRID).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(charts(at)) == 4
    assert any("No asymptote" in c.value for c in at.caption)


def test_pure_ssm_fit_page_says_what_is_true():
    at = app({"model": "state-spaces/mamba2-2.7b"})
    shown = metrics(at)
    assert shown["Max context, one sequence"] == "no limit"
    (sentence,) = [s.value for s in at.success]
    assert "16M" not in sentence.split("checked up to")[0]  # the search cap is named as such, not as a reach
    assert "KV fp16" not in sentence and "no KV cache" in sentence
    assert len(at.dataframe[0].value) == 1  # one row instead of a dozen identical ones


def test_vllm_below_one_request_does_not_show_a_fraction_as_a_count():
    model, engine = load_model("Qwen/Qwen3-8B"), configured("vllm")
    for gib in range(17, 40):  # a card where vLLM's pool holds part of one 32K request
        setup = Setup(model=model, engine=engine, card=Card.custom(gib), weights="bf16")
        row = fit(setup, [32768]).rows[0]
        if 0 < row.max_concurrency < 1:
            break
    else:
        pytest.fail("no card size leaves vLLM a fraction of one request")
    at = app({"model": "Qwen/Qwen3-8B", "engine": "vllm", "weights": "bf16", "gib": str(gib)})
    shown = metrics(at)
    assert shown["Fits?"] == "no"
    assert shown["Requests at 32K"] == f"none ({math.floor(row.max_concurrency * 100) / 100:.2f} of one)"  # cut


def test_wording_singular_and_article():
    model = load_model("Qwen/Qwen3-8B")
    engine = configured("llama.cpp")
    for gib in [x / 4 for x in range(20, 60)]:  # find a card where exactly one 8K request fits
        setup = Setup(model=model, engine=engine, card=Card.custom(gib), weights="q4_k_m")
        result = fit(setup, [8192])
        if result.rows[0].max_concurrency == 1:
            break
    else:
        pytest.fail("no card size gives exactly one request")
    sentence = verdict(result, result.rows[0]).sentence
    assert "1 request of 8K" in sentence and "1 requests" not in sentence
    assert "an 8K-token context" in sentence


# --- 10 and 12. layouts, asymptote, colours, per-model caps -------------------------------------------------------
@pytest.mark.parametrize("model", ["google/gemma-2-9b-it", "google/gemma-3-4b-it", "openai/gpt-oss-20b"])
def test_sliding_window_models_are_not_called_dense(model):
    assert layout(load_model(model)) == "sliding-window + full attention"
    at = app({"model": model, "cmp": ""})
    at.switch_page(HYBRID).run()
    text = " ".join(x.value for x in [*at.info, *at.caption, *at.markdown])
    assert "dense" not in text.lower()
    assert at.dataframe[0].value["cache layout"][0] == "sliding-window + full attention"


@pytest.mark.parametrize("engine", ["llama.cpp", "transformers", "vllm"])
def test_gemma2_asymptote_is_not_below_the_data(engine):
    at = app({"model": "google/gemma-2-9b-it", "cmp": "", "engine": engine, "weights": "bf16"})
    at.switch_page(HYBRID).run()
    ratio_chart = charts(at)[1]
    (line,) = [s for s in ratio_chart["layout"]["shapes"]]
    data = [y for trace in ratio_chart["data"] for y in trace["y"] if y is not None]
    assert line["y0"] >= max(data) - 1e-9


def test_each_model_keeps_its_colour_and_its_own_max():
    at = app({"model": "nvidia/Nemotron-H-8B-Base-8K", "cmp": "Qwen/Qwen3-8B,google/gemma-3-4b-it"})
    at.switch_page(HYBRID).run()
    colours: dict[str, set[str]] = {}
    figures = charts(at)
    for fig in figures:
        for trace in fig["data"]:
            colour = trace.get("line", {}).get("color") or trace.get("marker", {}).get("color")
            colours.setdefault(trace["name"], set()).add(colour)
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)
    bars = figures[3]["data"]
    setup = Setup(model=load_model("Qwen/Qwen3-8B"), engine=configured("llama.cpp"), card=Card.custom(8),
                  weights="q4_k_m")  # fmt: skip
    for trace in bars:
        own = context_limit(replace(setup, model=load_model(trace["name"].split(" (all")[0])))
        assert [t == "max" for t in trace["text"]] == [y >= own for y in trace["y"]], trace["name"]
    qwen = next(t for t in bars if t["name"] == "Qwen/Qwen3-8B")
    assert any(8192 < y < context_limit(replace(setup, model=load_model("Qwen/Qwen3-8B"))) for y in qwen["y"])


# --- 14. GPU counts the model cannot be split over ---------------------------------------------------------------
def test_unsplittable_gpu_count_offers_the_valid_ones():
    at = app({"model": "Qwen/Qwen3-8B", "engine": "vllm", "weights": "bf16", "card": "H100 80GB SXM5", "gpus": "3"})
    assert not at.exception
    (error,) = main_errors(at)
    assert "3 GPUs" in error
    offered = [b.label for b in at.main.button]
    assert offered and "3 GPUs" not in offered
    for label in offered:
        at.main.button(key=f"gpus_{label.split()[0]}").click().run()
        assert not main_errors(at) and at.metric, label
        assert at.number_input(key="in_gpus").value == int(label.split()[0])
        at.number_input(key="in_gpus").set_value(3).run()


# --- 15. the model-only sidebar ------------------------------------------------------------------------------------
def test_model_only_sidebar_hides_card_engine_and_context():
    at = app({"engine": "vllm"})
    at.switch_page("pages/2_measure_live.py").run()  # a page that draws only the model in the sidebar
    keys = {w.key for w in [*at.sidebar.selectbox, *at.sidebar.text_input, *at.sidebar.number_input]}
    assert "in_model" in keys
    assert not keys & {"in_card", "in_engine", "in_ctx_text", "in_gpus", "in_kv"}
    assert at.query_params["engine"] == "vllm"  # hidden inputs keep their values and stay in the link


# --- 16. downloads and gpu_memory_utilization ---------------------------------------------------------------------
def test_gpu_memory_utilization_is_offered_for_vllm_and_carried_in_the_link():
    base = {"model": "Qwen/Qwen3-8B", "engine": "vllm", "weights": "bf16", "card": "H100 80GB SXM5"}
    at = app(base)
    assert at.number_input(key="in_util").value == pytest.approx(Setup.__dataclass_fields__[
        "gpu_memory_utilization"].default)  # fmt: skip
    before = metrics(at)["Requests at 32K"]
    at.number_input(key="in_util").set_value(0.5).run()
    assert at.query_params["util"] == "0.5"
    setup = Setup(model=load_model("Qwen/Qwen3-8B"), engine=configured("vllm"), card=card_named("H100 80GB SXM5"),
                  weights="bf16", gpu_memory_utilization=0.5)  # fmt: skip
    result = fit(setup, sorted(set(table_contexts(context_limit(setup))) | {32768}))
    row = next(r for r in result.rows if r.context == 32768)
    assert metrics(at)["Requests at 32K"] == f"{math.floor(row.max_concurrency * 100) / 100:,.2f}" != before
    assert "in_util" not in [n.key for n in app({"engine": "llama.cpp"}).number_input]


def test_hub_mode_travels_in_the_link():
    # a bundled preset and the Hub's current config.json can differ: the receiver must ask the same place
    sender = app({"model": "Qwen/Qwen3-8B"})
    sender.radio(key="in_source").set_value("Hub").run()
    receiver = reopen(share_link(sender))
    assert receiver.radio(key="in_source").value == "Hub"
    assert [w.value for w in receiver.warning] == [w.value for w in sender.warning]
    assert metrics(receiver) == metrics(sender)
