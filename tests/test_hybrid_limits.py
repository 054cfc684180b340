"""Issue 20 item 4: a model without a position limit (pure state-space) beside others on the hybrid page. "No
limit" is a marker, not kvscope's 16M search cap drawn as a number; every curve stops at its own model's limit."""

from __future__ import annotations

from core.engines import configured
from core.fit import Setup, context_limit
from core.memory.gpus import card_named
from core.model.loading import load_model
from tests.test_app import app
from tests.test_app_issue9 import HYBRID, charts

SSM, DENSE = "state-spaces/mamba2-2.7b", "Qwen/Qwen3-8B"


def _page():
    at = app({"model": SSM, "cmp": DENSE, "card": "GeForce RTX 4090 24GB"})
    at.switch_page(HYBRID).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_no_limit_is_a_marker_in_the_table_and_not_a_bar():
    at = _page()
    table = at.dataframe[0].value.set_index("model")
    assert table.loc[SSM, "model's context limit"] == "no limit"
    dense_limit = context_limit(Setup(model=load_model(DENSE), engine=configured("llama.cpp"),
                                      card=card_named("GeForce RTX 4090 24GB"), weights="q4_k_m"))  # fmt: skip
    bars = next(f for f in charts(at) if f["data"] and f["data"][0]["type"] == "bar")["data"]
    assert SSM not in {t["name"] for t in bars}
    assert max(y for t in bars for y in t["y"]) <= dense_limit  # the axis is no longer scaled to 16M
    assert any(SSM in c.value and "no context limit" in c.value for c in at.caption)


def test_every_curve_stops_at_its_own_models_limit():
    at = _page()
    dense_limit = load_model(DENSE).max_context
    for fig in charts(at):
        for trace in fig["data"]:
            if trace["type"] == "scatter" and trace["name"] == DENSE:
                assert max(trace["x"]) <= dense_limit, (fig["layout"].get("yaxis"), max(trace["x"]))
    xs = [x for fig in charts(at) for t in fig["data"] if t["type"] == "scatter" for x in t["x"]]
    assert max(xs) <= 1 << 20  # the state-space model is drawn as far as its comparator, not to the 16M cap


def test_the_table_names_the_models_limit_and_the_caption_the_weights_sized():
    """The column read "longest context" and gave the model's limit (256K) where Fit a card's longest context on
    the card was 52,220; under transformers the caption named q4_k_m while the page sized bf16 (a browser audit)."""
    at = app({"model": "Qwen/Qwen3.5-9B", "card": "custom", "gib": "24", "engine": "transformers"})
    at.switch_page(HYBRID).run()
    table = at.dataframe[0].value.set_index("model")
    assert table.loc["Qwen/Qwen3.5-9B", "model's context limit"] == "256K"
    assert any("weights (q4_k_m, loaded by transformers as bf16)" in c.value for c in at.caption)
