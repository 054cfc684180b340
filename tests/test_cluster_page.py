"""The "vLLM across nodes" page under AppTest: what it shows must be core.engines.vllm_cluster's plans for the
inputs in the link, and its inputs must travel in the link."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from core.engines.vllm_cluster import Cluster, evaluate, plain_tp, plans
from core.memory.gpus import card_named
from core.model.loading import load_model
from tests.test_app import open_page
from ui.state import from_query

ROOT = Path(__file__).resolve().parents[1]


def _page(params: dict[str, str]) -> AppTest:
    return open_page("pages/6_cluster.py", params)


def test_page_shows_cores_plans_for_the_link():
    at = _page({"model": "deepseek-ai/DeepSeek-V3", "ctx": "32k", "ccard": "H200", "nodes": "2", "gpn": "8"})
    model = load_model("deepseek-ai/DeepSeek-V3")
    cluster = Cluster(card_named("H200"), 2, 8)
    expected = plans(model, cluster, 32768)
    shown = at.dataframe[0].value
    assert list(shown["plan"]) == [r.label for r in expected]
    assert list(shown["requests"]) == [r.requests for r in expected]
    metrics = {m.label: m.value for m in at.metric}
    base = evaluate(model, cluster, plain_tp(model, cluster), 32768)
    layout = expected[0].layout
    assert metrics["Best plan"] == f"TP{layout.tp} PP{layout.pp} DP{layout.dp}"  # short: a metric cuts long values
    assert f"**Best plan:** {expected[0].label}" in [m.value for m in at.markdown]
    assert metrics["vs plain TP"] == f"{expected[0].requests / base.requests:.2f}×"
    assert any(expected[0].layout.flags() in c.value for c in at.code)


def test_cluster_inputs_round_trip_and_bad_values_are_named():
    at = _page({"model": "moonshotai/Kimi-K2-Instruct", "ctx": "32k", "ccard": "H100", "nodes": "4", "ep": "on"})
    shown = at.dataframe[0].value
    assert all("EP" in plan for plan in shown["plan"] if "DP" in plan)  # only plans with expert parallel
    assert shown["requests"].sum() > 0 and all("PP 4" in p or "DP" in p for p in shown["plan"])  # 32 GPUs
    assert (at.query_params["ep"], at.query_params["nodes"]) == ("on", "4")
    assert "ccard" not in at.query_params  # "H100" is the default card by its full name: links stay short
    inputs, ignored = from_query({"nodes": "0", "gpn": "lots", "ccard": "no such card", "ep": "maybe"})
    assert (inputs.nodes, inputs.gpn, inputs.ep) == (2, 8, "auto")
    assert len(ignored) == 4 and all(k in " ".join(ignored) for k in ("nodes", "gpn", "ccard", "ep"))


def test_an_unreadable_context_leaves_the_box_to_mend_it_in():
    """The sidebar stopped the page on ctx=0 before the page drew its own context box: only the error was left, and
    a link carrying it was a dead end. The box now stands beside the error, and mending it brings the plans."""
    at = _page({"model": "deepseek-ai/DeepSeek-V3", "ctx": "0", "ccard": "H200", "nodes": "2", "gpn": "8"})
    assert any("token count must be positive" in e.value for e in at.error) and not at.dataframe
    (box,) = [t for t in at.text_input if t.key == "in_ctx_text"]
    assert box.value == "0"
    box.input("16k").run()
    assert not at.error and at.dataframe and at.query_params["ctx"] == "16K"


def test_the_sidebars_max_num_seqs_caps_each_engine_cores_requests():
    """mns=16 (vLLM's --max-num-seqs, set in the sidebar): every plan's requests are its DP ranks × at most 16, as
    `python -m core cluster --max-num-seqs 16` plans them; the caption names the figure in place of the default."""
    params = {"model": "deepseek-ai/DeepSeek-V3", "ctx": "32k", "ccard": "H200", "nodes": "2", "gpn": "8"}
    at = _page(params | {"mns": "16"})
    model, cluster = load_model("deepseek-ai/DeepSeek-V3"), Cluster(card_named("H200"), 2, 8)
    expected = plans(model, cluster, 32768, max_num_seqs=16)
    shown = at.dataframe[0].value
    assert list(shown["requests"]) == [r.requests for r in expected]
    assert all(r.requests_per_rank <= 16 for r in expected) and any(r.requests_per_rank == 16 for r in expected)
    assert expected[0].requests < plans(model, cluster, 32768)[0].requests  # the default (1,024) did not bind here
    assert any("max_num_seqs 16, as the sidebar sets it" in c.value for c in at.caption)
