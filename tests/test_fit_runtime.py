"""Fit a card with the "ollama" front end shows what Ollama itself does with those inputs (issue 20, item 2): the
split and speed of the Ollama page, worked out here from core.ollama_report.ollama_row, not read off the page."""

from __future__ import annotations

from dataclasses import replace

import pytest
import streamlit as st

from core.engines.runtimes import OllamaSettings
from core.errors import InputError
from core.llamacpp_autofit import fit_params
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.ollama_report import fit_card_settings, ollama_row
from tests.test_app import app
from ui.inputs import setup_for
from ui.state import Inputs

LINK = {
    "model": "Qwen/Qwen3-8B",
    "card": "GeForce RTX 4060 8GB",
    "engine": "llama.cpp",
    "fe": "ollama",
    "kv": "q8_0",
    "ctx": "32K",
}


@pytest.fixture(autouse=True)
def streamlits_page_link(monkeypatch):
    """tests/test_app_issue9.py replaces st.page_link for the rest of the process; these tests need the real one."""
    monkeypatch.setattr(st, "page_link", st._main.page_link)


def links_to_the_ollama_page(at) -> list:
    """st.page_link elements in the page's body (the sidebar links every page) to pages/5_ollama.py, which
    Streamlit names "ollama" (its file name without the number)."""
    return [el for el in at.main.get("page_link") if el.proto.page == "ollama"]


def shown_text(at) -> str:
    return " ".join(el.value for kind in (at.info, at.warning) for el in kind)


def test_fit_a_card_shows_ollamas_split_and_speed():
    at = app(LINK)
    assert not at.exception, [e.value for e in at.exception]
    row = ollama_row(
        load_model("Qwen/Qwen3-8B"),
        card_named("GeForce RTX 4060 8GB"),
        OllamaSettings(num_ctx=32768, kv_cache_type="q8_0"),
        "q4_k_m",
    )
    # current Ollama (v0.30.0 on) leaves -ngl to llama-server's --fit, so its split is the fit's; Qwen3-8B has 36
    # blocks, and at 32K on 8 GB some stay in RAM
    choice = fit_params(replace(row.fit.setup, gpu_layers=None), 32768, 1)
    assert row.layers == choice.gpu_layers and row.blocks == 36 and not row.full
    text = shown_text(at)
    assert f"offload {row.layers} of {row.blocks + 1} layers" in text and "llama-server's --fit" in text
    assert f"~{row.decode_tok_s:.1f} tok/s" in text
    assert links_to_the_ollama_page(at)


def test_other_front_ends_show_no_ollama_line():
    at = app(LINK | {"fe": "llama-server"})
    assert not at.exception
    assert "Ollama would" not in shown_text(at)
    assert not links_to_the_ollama_page(at)


def test_a_hybrid_gets_ollamas_split_too():
    """Ollama's v0.12.10 estimate covered attention-only models; current Ollama's llama-server fit covers the
    hybrid (Qwen3.5-9B: 24 Gated DeltaNet layers), so Fit a card shows its split rather than a refusal."""
    at = app(LINK | {"model": "Qwen/Qwen3.5-9B"})
    assert not at.exception
    row = ollama_row(
        load_model("Qwen/Qwen3.5-9B"),
        card_named("GeForce RTX 4060 8GB"),
        OllamaSettings(num_ctx=32768, kv_cache_type="q8_0"),
        "q4_k_m",
    )
    text = shown_text(at)
    assert "full-attention models only" not in text
    placed = f"all {row.blocks + 1} layers" if row.full else f"{row.layers} of {row.blocks + 1} layers"
    assert f"offload {placed}" in text
    assert links_to_the_ollama_page(at)


def setup_of(**changes):
    inputs = Inputs(**(dict(model="Qwen/Qwen3-8B", engine="llama.cpp", fe="ollama") | changes))
    return setup_for(inputs, load_model(inputs.model))


@pytest.mark.parametrize(("kv", "ollama"), [("auto", "f16"), ("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")])
def test_the_pages_kv_type_becomes_ollama_kv_cache_type(kv, ollama):
    settings = fit_card_settings(setup_of(kv=kv), 8192)
    assert (settings.kv_cache_type, settings.num_ctx, settings.num_parallel) == (ollama, 8192, 1)


def test_a_kv_type_ollama_lacks_is_refused():
    with pytest.raises(InputError, match="OLLAMA_KV_CACHE_TYPE"):
        fit_card_settings(setup_of(kv="q5_1"), 8192)
