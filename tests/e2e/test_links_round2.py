"""Issue 20's must-show, in Chromium: a link from every page, with every input changed from its default, copied from
the page's share box and opened in a fresh browser context (a teammate's), gives back every input and the same
answer."""

from __future__ import annotations

import time
from dataclasses import fields, replace
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.e2e.conftest import VIEWPORT, WAIT_MS, wait_for_app
from tests.e2e.test_browser import pasted_in_chat, shared_link
from ui.state import CUSTOM_FIGURES, DEFAULTS, Inputs, from_query, share_query

# Every field away from its default, in values that make sense together (vLLM on two H100s for the sizing pages;
# the llama.cpp-only fields still travel, as the sidebar keeps them for when the engine changes back).
CHANGED = Inputs(
    model="Qwen/Qwen3-8B", source="Hub", card="H100 80GB SXM5", gib=24.0, gbs=1500.5, tflops=300.0, gpus=2,
    weights="bf16", kv="fp8",
    engine="vllm", ctx=16384, ngl=20, ncmoe=1, swa="on", kvu="off", fa="off", ub=1024, plat="cpu", vver="0.20",
    fe="llama-server", backend="vulkan", ram=33.5, thr=6, isa="avx512", mns=64,
    util=0.85, layers=30, kvh=4, hd=64, win=1024, pat="FFFS", cmp="google/gemma-3-4b-it", ccard="H200 141GB SXM",
    hpt="google/gemma-3-4b-it@8K",
    nodes=3, gpn=4, ep="on", ckv="fp8", ftab="models", ocards="GeForce RTX 4060 8GB,GeForce RTX 3060 12GB",
    omodels="microsoft/phi-4", octx="8k", onp=2, okv="q8_0", ofa="on", oover=512, ow="q5_k_m", oram="given",
    ogbs=45.5, othr=6, ofree="6GiB", oall="on", pctx="1k, 4k", pdev="cpu", pbe="vllm", players=4, psteps=16,
    ptime=120, pkv="fp8", putil=0.8, pmnbt=512, pmns=8, ppc="off", pbs=32,
)  # fmt: skip
# what a link carries of CHANGED: a listed card has its own figures, so the custom card's (gib, gbs, tflops) stay home
# (tests/test_app.py::test_a_listed_cards_link_figures_are_named_as_ignored_and_not_carried_on)
SENT = replace(CHANGED, **{key: getattr(DEFAULTS, key) for key in CUSTOM_FIGURES})
PAGES = {
    "/": "Fit a card",
    "/hybrid_vs_dense": "Hybrid vs full attention",
    "/measure_live": "Measure live",
    "/finders": "Which card, which model",
    "/ollama": "Ollama on your card",
    "/cluster": "vLLM across nodes",
}


def test_every_field_is_changed():
    same = [f.name for f in fields(Inputs) if getattr(CHANGED, f.name) == getattr(DEFAULTS, f.name)]
    assert same == ["config"], same  # an upload replaces the model: tests/test_share_round2.py covers it


def _text(page) -> str:
    """The main area's text, less what moves between runs (the probe's clock)."""
    text = page.locator('[data-testid="stMain"]').inner_text()
    return "\n".join(line for line in text.splitlines() if " s ago" not in line)


def _answer(page, settle_s: float = 30.0) -> str:
    """What the page answers, once drawn: tables and charts mount after the script run ends (the data grid builds
    its accessible table and plotly its labels later still), so the text is read until two reads a second apart
    agree."""
    last, deadline = None, time.monotonic() + settle_s
    while time.monotonic() < deadline:
        page.wait_for_timeout(1000)
        text = _text(page)
        if text == last:
            return text
        last = text
    return last


def _same_answer(receiver, sender_answer: str, settle_s: float = 30.0) -> str:
    """The receiver's answer once it equals the sender's, or as it stands when `settle_s` has passed."""
    deadline = time.monotonic() + settle_s
    text = _text(receiver)
    while text != sender_answer and time.monotonic() < deadline:
        receiver.wait_for_timeout(500)
        text = _text(receiver)
    return text


def _fresh(chromium):
    context = chromium.new_context(viewport=VIEWPORT)
    context.set_default_timeout(WAIT_MS)
    return context, context.new_page()


@pytest.mark.parametrize("path", list(PAGES))
def test_a_link_from_every_page_round_trips_into_a_fresh_context(chromium, server, path):
    from playwright.sync_api import expect

    sender_context, sender = _fresh(chromium)
    receiver_context, receiver = _fresh(chromium)
    try:
        sender.goto(f"{server.url}{path}?{share_query(CHANGED)}")
        expect(sender.locator("h1")).to_have_text(PAGES[path], timeout=60_000)
        wait_for_app(sender)
        link = pasted_in_chat(shared_link(sender))
        assert urlsplit(link).path.rstrip("/") == path.rstrip("/"), link
        inputs, ignored = from_query(dict(parse_qsl(urlsplit(link).query)))
        assert ignored == [] and inputs == SENT, [
            (f.name, getattr(inputs, f.name))
            for f in fields(Inputs)
            if getattr(inputs, f.name) != getattr(SENT, f.name)
        ]
        receiver.goto(link)
        expect(receiver.locator("h1")).to_have_text(PAGES[path], timeout=60_000)
        wait_for_app(receiver)
        assert pasted_in_chat(shared_link(receiver)) == link
        expected = _answer(sender)
        assert _same_answer(receiver, expected) == expected
    finally:
        sender_context.close()
        receiver_context.close()


def test_the_ollama_lists_survive_the_reruns_after_the_first_paint(chromium, server):
    """The Ollama page's two lists sit folded in its settings box. The tab sometimes sent them back empty with the
    rerun after the paint's, as if emptied by hand (ui.inputs.list_widget_value), and the share box's link lost
    them: 4 of 8 runs of the round trip above, two tabs loading at once. Here three rounds of three tabs at once:
    in each tab, the link from the share box (opening it is one more rerun) holds the lists, and the settings box
    shows them."""
    from playwright.sync_api import expect

    query = share_query(CHANGED)
    for _ in range(3):
        tabs = [_fresh(chromium) for _ in range(3)]
        try:
            for _, page in tabs:
                page.goto(f"{server.url}/ollama?{query}")
            for _, page in tabs:
                expect(page.locator("h1")).to_have_text(PAGES["/ollama"], timeout=60_000)
                wait_for_app(page)
                link = dict(parse_qsl(urlsplit(shared_link(page)).query))
                assert (link.get("ocards"), link.get("omodels")) == (CHANGED.ocards, CHANGED.omodels), link
                page.get_by_text("Ollama settings and host").click()
                lists = page.locator('[data-testid="stMultiSelect"]')
                expect(lists.first).to_contain_text("GeForce RTX 3060 12GB")
                expect(lists.nth(1)).to_contain_text("microsoft/phi-4")
                wait_for_app(page)
                assert "Pick at least one card." not in _text(page)
        finally:
            for context, _ in tabs:
                context.close()


def test_the_fact_check_link_round_trips_into_a_fresh_context(chromium, server):
    from playwright.sync_api import expect

    sender_context, sender = _fresh(chromium)
    receiver_context, receiver = _fresh(chromium)
    try:
        sender.goto(f"{server.url}/fact_check?verdict=agrees&metric=kv_bytes_per_token")
        expect(sender.locator('[data-testid="stMetric"]')).to_have_count(3, timeout=60_000)
        wait_for_app(sender)
        link = pasted_in_chat(shared_link(sender))
        assert dict(parse_qsl(urlsplit(link).query)) == {"verdict": "agrees", "metric": "kv_bytes_per_token"}
        receiver.goto(link)
        expect(receiver.locator('[data-testid="stMetric"]')).to_have_count(3, timeout=60_000)
        wait_for_app(receiver)
        expected = _answer(sender)
        assert _same_answer(receiver, expected) == expected
    finally:
        sender_context.close()
        receiver_context.close()
