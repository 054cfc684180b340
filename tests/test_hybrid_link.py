"""The hybrid page's worked point travels in the link (`hpt`): a shared link opened on another point (the first model
at 1K) under a box that says the link reproduces the view. A point the link names but the page does not draw gives
way to a drawn one with a note; one that cannot be read is ignored with the sidebar's message, never a traceback."""

from __future__ import annotations

import json
import time

import pytest

from core.errors import InputError
from core.explain import worked_point
from tests.conftest import ROOT
from tests.rendered import shown
from tests.test_app import app, opened
from tests.test_app_issue9 import reopen, share_link, through_chat
from ui.state import from_query, read_point

PAGE = "pages/1_hybrid_vs_dense.py"
HYBRID = {"model": "Qwen/Qwen3.5-9B", "card": "GeForce RTX 4090 24GB", "cmp": "google/gemma-3-12b-it"}
CPU_BOUND_S = 2.0  # one request's CPU (the project's bound)


def limit(preset: str) -> int:
    """The model's own longest context, read from its bundled config: where its curve ends."""
    raw = json.loads((ROOT / "core/model/presets" / f"{preset.replace('/', '__')}.json").read_text())
    return raw.get("text_config", raw)["max_position_embeddings"]


def hybrid(params: dict[str, str]):
    at = app(params)
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def worked(at) -> list[str]:
    """The worked point's heading, as the page draws it (none while the box is closed)."""
    return [m.value for m in at.markdown if m.value.startswith("### ")]


def worked_text(at) -> str:
    return "\n".join(m.value for m in at.markdown)


@pytest.mark.parametrize(
    ("model", "context", "sent"),
    [
        ("google/gemma-3-12b-it", 32768, "google/gemma-3-12b-it@32K"),
        ("Qwen/Qwen3.5-9B (all 32 full)", 8192, "Qwen/Qwen3.5-9B (all 32 full)@8K"),  # the skeleton: spaces, ()
    ],
)
def test_a_shared_link_opens_on_the_same_worked_point(model, context, sent):
    sender = opened(hybrid(HYBRID), "kv_how_hybrid_point")
    sender.selectbox(key="hy_point_model").set_value(model).run()
    sender.selectbox(key="hy_point_ctx").set_value(context).run()
    assert not sender.exception, [e.value for e in sender.exception]
    (heading,) = worked(sender)
    assert heading.startswith(f"### {model}: requests of {context // 1024}K tokens at once")
    link = share_link(sender)
    assert through_chat(link)["hpt"] == sent
    receiver = reopen(link, PAGE)
    assert not receiver.exception, [e.value for e in receiver.exception]
    # open without a click, on the sender's point: the same boxes and the same arithmetic, line for line
    assert worked(receiver) == [heading]
    assert receiver.selectbox(key="hy_point_model").value == model
    assert receiver.selectbox(key="hy_point_ctx").value == context
    assert worked_text(receiver) == worked_text(sender)
    assert not receiver.warning and not receiver.info


def test_a_link_without_a_point_opens_the_box_closed_and_carries_none():
    at = hybrid(HYBRID)
    assert not worked(at)
    assert "hpt" not in through_chat(share_link(at))
    at = opened(at, "kv_how_hybrid_point")
    assert worked(at)[0].startswith("### Qwen/Qwen3.5-9B: requests of 1K tokens")


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("Qwen/Qwen3.5-9B@-5", "token count must be positive"),
        ("Qwen/Qwen3.5-9B@1e9", "cannot read '1e9' as a token count"),
        ("Qwen/Qwen3.5-9B@99999999999999999999", "more than kvscope sizes"),
        ("Qwen/Qwen3.5-9B@lots", "cannot read 'lots'"),
        ("Qwen/Qwen3.5-9B", "write the worked point as model@context"),
        ("", "write the worked point as model@context"),
        ("[click](https://example.com)@1K", "write the worked point as model@context"),  # no markup into a note
        ("a" * 300 + "@1K", "write the worked point as model@context"),
    ],
)
def test_an_unreadable_point_is_ignored_with_the_reason(value, said):
    at = hybrid(HYBRID | {"hpt": value})
    start = time.process_time()
    at.run()
    spent = time.process_time() - start
    assert not at.exception, [e.value for e in at.exception]
    warnings = [shown(w.value) for w in at.warning if w.value.startswith("Some link parameters were ignored")]
    assert len(warnings) == 1 and "hpt=" in warnings[0] and said in warnings[0], warnings
    assert not worked(at)  # the default: the box closed, as a link without a point opens it
    assert spent < CPU_BOUND_S, f"{spent:.2f} CPU s"


@pytest.mark.parametrize(
    ("value", "model", "context", "said"),
    [
        # a billion tokens is a count kvscope reads, past the curve: its last point, the model's limit
        (
            "Qwen/Qwen3.5-9B@1000000000",
            "Qwen/Qwen3.5-9B",
            limit("Qwen/Qwen3.5-9B"),
            "no point at 1,000,000,000 tokens (past its last",
        ),
        ("google/gemma-3-12b-it@256K", "google/gemma-3-12b-it", limit("google/gemma-3-12b-it"), "(past its last"),
        ("google/gemma-3-12b-it@3000", "google/gemma-3-12b-it", 2048, "(between two of its points)"),
        ("google/gemma-3-12b-it@512", "google/gemma-3-12b-it", 1024, "(before its first, 1K)"),
        ("meta-llama/not-compared@32K", "Qwen/Qwen3.5-9B", 32768, "names meta-llama/not-compared, which this page"),
    ],
)
def test_a_point_the_page_does_not_draw_gives_way_with_a_note(value, model, context, said):
    at = hybrid(HYBRID | {"hpt": value})
    start = time.process_time()
    at.run()
    spent = time.process_time() - start
    assert not at.exception, [e.value for e in at.exception]
    assert not any(w.value.startswith("Some link parameters") for w in at.warning)
    (note,) = [i.value for i in at.info]
    assert said in note, note
    (heading,) = worked(at)
    assert heading.startswith(f"### {model}: requests of {context // 1024}K tokens at once"), heading
    assert at.selectbox(key="hy_point_model").value == model and at.selectbox(key="hy_point_ctx").value == context
    assert spent < CPU_BOUND_S, f"{spent:.2f} CPU s"


def test_the_link_reads_a_point_in_one_spelling():
    inputs, ignored = from_query({"hpt": "google/gemma-3-12b-it@32768"})
    assert ignored == [] and inputs.hpt == "google/gemma-3-12b-it@32K"
    inputs, ignored = from_query({"hpt": "uploaded config.json@1,000"})
    assert ignored == [] and inputs.hpt == "uploaded config.json@1000"


def test_worked_point_falls_back_to_drawn_points():
    drawn = {"a": (1024, 2048, 4096, 5000), "b": ()}
    assert worked_point(drawn, None) == ("a", 1024, None)
    assert worked_point(drawn, ("a", 4096)) == ("a", 4096, None)
    name, context, note = worked_point(drawn, ("a", 6000))
    assert (name, context) == ("a", 5000) and note and "past its last, 5,000" in note
    name, context, note = worked_point(drawn, ("b", 4096))
    assert (name, context, note) == ("b", None, None)  # its curve draws nothing: the page says so itself
    name, context, note = worked_point(drawn, ("c", 2048))
    assert (name, context) == ("a", 2048) and note and note.startswith("The worked point names c,")


@pytest.mark.parametrize("value", ["no-at-sign", "@1K", "x@", "x@0", "x\n@1K"])
def test_unreadable_points_are_refused_by_read_point(value):
    with pytest.raises(InputError):
        read_point(value)
    inputs, ignored = from_query({"hpt": value})
    assert inputs.hpt == "" and len(ignored) == 1 and ignored[0].startswith("hpt="), ignored


def test_a_model_switch_past_its_curve_travels_with_its_note():
    """The context box keeps its value when another model is chosen; past that model's curve the page works out its
    last point and says so, and the link (which carries what was asked) gives the receiver the same note and point."""
    sender = opened(hybrid(HYBRID), "kv_how_hybrid_point")
    sender.selectbox(key="hy_point_ctx").set_value(limit("Qwen/Qwen3.5-9B")).run()
    sender.selectbox(key="hy_point_model").set_value("google/gemma-3-12b-it").run()
    gemma = limit("google/gemma-3-12b-it")
    assert sender.selectbox(key="hy_point_ctx").value == gemma < limit("Qwen/Qwen3.5-9B")
    (note,) = [i.value for i in sender.info]
    assert f"past its last, {gemma // 1024}K" in note
    receiver = reopen(share_link(sender), PAGE)
    assert [i.value for i in receiver.info] == [note]
    assert worked_text(receiver) == worked_text(sender)
