"""What-if edits: depth, attention shape and layer pattern, on the pure side and through the app."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from core.engines import engine_named
from core.errors import InputError
from core.model.loading import load_model
from core.model.whatif import all_full_attention, edited
from core.units import format_bytes
from tests.conftest import ROOT

QWEN35 = load_model("Qwen/Qwen3.5-9B")
TF = engine_named("transformers")


def test_pattern_f_is_the_all_full_skeleton():
    assert edited(QWEN35, pattern="F").layers == all_full_attention(QWEN35).layers


def test_pattern_repeats_over_the_layers_with_the_models_own_kinds():
    half = edited(QWEN35, pattern="LF")
    assert half.layer_counts() == {"gated_deltanet": 16, "full_attention": 16}
    # 16 attention layers at 4 KV heads × 256 in bf16; 16 Gated DeltaNet states as transformers keeps them
    assert TF.kv_bytes_per_token(half) == 16 * 2 * 4 * 256 * 2
    assert TF.fixed_bytes_per_sequence(half) == 16 * (8192 * 4 * 2 + 32 * 128 * 128 * 4)


def test_pattern_with_sliding_layers_and_more_depth():
    model = edited(QWEN35, num_layers=48, pattern="SSSF", window=4096, kv_heads=8)
    assert model.layer_counts() == {"sliding_window": 36, "full_attention": 12}
    account = TF.account(model, 100_000)
    per_layer = 2 * 8 * 256 * 2
    assert account.total == 12 * per_layer * 100_000 + 36 * per_layer * 4095


def test_a_dense_architecture_has_no_state_kind_to_place():
    with pytest.raises(InputError, match="no linear/state layer"):
        edited(load_model("Qwen/Qwen3-8B"), pattern="LLLF")


def test_a_dense_model_borrows_nothing_but_a_hybrid_architecture_supplies_its_state():
    # Qwen3.5's skeleton has lost its GDN layers, yet its architecture still defines them
    back = edited(all_full_attention(QWEN35), pattern="LLLF")
    assert back.layers == QWEN35.layers


@pytest.mark.parametrize("pattern", ["LLXF", "12"])
def test_bad_patterns_are_named(pattern):
    with pytest.raises(InputError, match="layer pattern"):
        edited(QWEN35, pattern=pattern)


def test_sliding_needs_a_window():
    with pytest.raises(InputError, match="window"):
        edited(load_model("Qwen/Qwen3-8B"), pattern="SF")


def test_the_app_applies_a_pattern_from_the_link():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180)
    for key, value in {
        "model": "Qwen/Qwen3.5-9B",
        "engine": "transformers",
        "weights": "bf16",
        "card": "H100",
        "pat": "LF",
    }.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception and not at.warning
    assert at.text_input(key="in_pat").value == "LF"
    expected = TF.account(edited(QWEN35, pattern="LF"), 32768).total
    assert {m.label: m.value for m in at.metric}["Cache at this context"] == format_bytes(expected)
