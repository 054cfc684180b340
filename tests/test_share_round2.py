"""Issue 20 (a new user, round 2), the sidebar's share box: a link carries the view as it is, problems included,
and nothing the sender no longer sees."""

from __future__ import annotations

import json

from tests.test_app import app, metrics
from tests.test_app_issue9 import main_errors, reopen, share_link, through_chat
from tests.tiny_configs import tiny_raw


def test_an_unreadable_context_travels_as_typed():
    """Item 9: the box said 'fix the inputs marked in red' (nothing was red) and the link held the last valid
    context, so the receiver saw figures the sender did not. Now the link carries the text and the receiver meets
    the same problem, named."""
    sender = app()
    sender.text_input(key="in_ctx_text").input("32k tokens").run()
    assert not sender.metric
    link = share_link(sender)
    assert through_chat(link)["ctx"] == "32k tokens"
    captions = " ".join(c.value for c in sender.sidebar.caption)
    assert "marked in red" not in captions and "Context: cannot read '32k tokens'" in captions
    receiver = reopen(link)
    assert not receiver.metric
    assert receiver.text_input(key="in_ctx_text").value == "32k tokens"
    assert main_errors(receiver) == main_errors(sender)


def test_an_upload_after_a_bad_hub_entry_drops_it_from_the_link():
    """Item 10: the Hub box's rejected text stayed in the link as model=… under the upload, and the receiver got a
    warning about it that the sender never saw."""
    at = app({"source": "Hub"})
    at.text_input(key="in_model").input("https://huggingface.co/Qwen/Qwen3-8B").run()
    assert main_errors(at)
    at.radio(key="in_source").set_value("Upload").run()
    at.text_area[0].input(json.dumps(tiny_raw("llama"))).run()
    assert metrics(at)
    link = share_link(at)
    assert "model" not in through_chat(link) and "https" not in link
    receiver = reopen(link)
    assert [w.value for w in receiver.warning] == [w.value for w in at.warning]  # nothing about the Hub entry
    assert metrics(receiver) == metrics(at)
