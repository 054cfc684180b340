"""Issue 20 item 13: what a closed box holds is not drawn into the first render (ui.layout.opened). Closed, the share
box's code box, the arithmetic and the speed's working are absent from the page; opened, as a click opens them, they
are there, with the same link and text as before."""

from __future__ import annotations

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
