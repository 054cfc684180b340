"""Issue 20 item 13: what a closed box holds is not drawn into the first render (ui.layout.opened). Closed, the share
box's code box, the arithmetic and the speed's working are absent from the page; opened, as a click opens them, they
are there, with the same link and text as before."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.test_app import app, opened


def test_closed_boxes_draw_nothing_until_opened():
    at = app({"model": "Qwen/Qwen3-8B", "card": "H100 80GB SXM5", "engine": "vllm", "weights": "bf16"})
    assert not at.exception
    labels = [e.label for e in at.expander]
    assert {"Share this view", "How is this computed?", "How is the speed computed?"} <= set(labels)
    assert not at.sidebar.code and all(not e.markdown for e in at.main.expander)
    for key in ("kv_share", "kv_how", "kv_how_speed"):
        at = opened(at, key)
    assert not at.exception
    (link,) = [c.value for c in at.sidebar.code]
    assert "model=Qwen%2FQwen3-8B" in link and "engine=vllm" in link
    text = {e.label: "\n".join(m.value for m in e.markdown) for e in at.main.expander}
    assert "layer slots ×" in text["How is this computed?"] and "Decode step" in text["How is the speed computed?"]


def _keys(at: AppTest) -> set[str]:
    return {w.key for w in [*at.number_input, *at.text_input]}


def _cache(at: AppTest) -> str:
    return {m.label: m.value for m in at.metric}["Cache at this context"]


def test_the_what_if_box_draws_its_inputs_only_when_open_or_edited():
    """Closed (no edit set), its inputs are not drawn; an edit made in it survives closing it, in the results and in
    the link; a link that carries an edit opens it, so the edited value shows."""
    at = app()
    plain = _cache(at)
    assert "Edit (what-if)" in [e.label for e in at.expander] and not {"in_layers", "in_pat"} & _keys(at)
    at = opened(at, "kv_whatif")
    at.number_input(key="in_layers").set_value(18).run()
    edited = _cache(at)
    assert edited != plain
    at.session_state["kv_whatif"] = False
    at.run().run()
    assert "in_layers" not in _keys(at) and _cache(at) == edited
    assert at.query_params["layers"] in ("18", ["18"])
    assert app({"layers": "18"}).number_input(key="in_layers").value == 18
