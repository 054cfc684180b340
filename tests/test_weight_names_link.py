"""A link's weight format takes every spelling the command line takes (issue 19 item 6: llama.cpp's names, any case),
and lands in the sidebar as its canonical name; an unknown one is named in a warning."""

from __future__ import annotations

import pytest

from tests.rendered import shown
from tests.test_app import app


@pytest.mark.parametrize(
    ("given", "shown"), [("Q4_K", "q4_k_m"), ("F16", "gguf_f16"), ("IQ2-XXS", "iq2_xxs"), ("q4_0", "q4_0")]
)
def test_llama_cpp_spellings_open_as_their_format(given, shown):
    at = app({"model": "Qwen/Qwen3-8B", "engine": "llama.cpp", "weights": given})
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="in_weights").value == shown
    assert not [w for w in at.warning if "weight format" in w.value]


def test_an_unknown_format_is_named():
    at = app({"model": "Qwen/Qwen3-8B", "engine": "llama.cpp", "weights": "Q9_K"})
    assert not at.exception
    assert any("Q9_K" in shown(w.value) for w in at.warning)
