"""Malformed configs: a clear message naming the field, never a traceback or a silent guess."""

from __future__ import annotations

import pytest

from core.errors import InputError
from core.model.config import parse_json
from core.model.loading import model_from_config
from tests.tiny_configs import tiny_raw


def load(raw):
    return model_from_config(raw, "test")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"hidden_size": 64}, "no model_type"),
        ({"model_type": "gpt_neo_x_9000", "num_hidden_layers": 2}, "unknown model_type 'gpt_neo_x_9000'"),
        (tiny_raw("llama", num_hidden_layers=-3), "num_hidden_layers"),
        (tiny_raw("llama", num_key_value_heads="eight"), "num_key_value_heads"),
        (tiny_raw("llama", num_key_value_heads=8), "exceeds num_attention_heads"),
        (tiny_raw("llama", hidden_size=10**9), "hidden_size"),
        (tiny_raw("llama", hidden_size=66, head_dim=None), "not a multiple"),
        (tiny_raw("qwen3_5_text", linear_num_value_heads=0), "linear_num_value_heads"),
        (tiny_raw("mistral", sliding_window=-1), "sliding_window"),
        (tiny_raw("deepseek_v3", kv_lora_rank=None), "kv_lora_rank"),
    ],
)
def test_bad_configs_raise_input_errors_naming_the_problem(raw, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        load(raw)


def test_error_names_the_model_type():
    with pytest.raises(InputError) as err:
        load(tiny_raw("qwen3_5_text", linear_key_head_dim=2.5))
    assert "qwen3_5_text" in str(err.value) and "linear_key_head_dim" in str(err.value)


@pytest.mark.parametrize("text", ["{", "[1, 2]", b"\xff\xfe", ""])
def test_broken_json_is_reported_as_such(text):
    with pytest.raises(InputError, match=r"config\.json"):
        parse_json(text, "config.json")


def test_unknown_to_transformers_but_known_to_kvscope_uses_raw_fallback():
    raw = tiny_raw("deepseek_v3") | {"model_type": "kimi_k2"}
    spec = load(raw)
    assert spec.layer_counts() == {"mla": 2}


def test_mamba_ssm_native_config_is_translated():
    raw = {"d_model": 64, "n_layer": 3, "vocab_size": 100, "ssm_cfg": {"layer": "Mamba2", "headdim": 16}}
    spec = load(raw)
    (layer,) = set(spec.layers)
    assert spec.layer_counts() == {"mamba2": 3}
    assert (layer.heads, layer.head_dim, layer.d_state, layer.intermediate) == (8, 16, 128, 128)


def test_a_mamba_ssm_hybrid_with_attention_layers_is_refused_not_sized_as_pure_mamba():
    """mamba2attn's attn_layer_idx names 6 MHA layers kvscope's translation had no field for: it sized 64 Mamba2
    layers and no K/V (18× under at 32K)."""
    raw = {"d_model": 64, "n_layer": 4, "vocab_size": 100, "ssm_cfg": {"layer": "Mamba2", "headdim": 16},
           "attn_layer_idx": [1, 3], "attn_cfg": {"num_heads": 4}}  # fmt: skip
    with pytest.raises(InputError, match=r"attn_layer_idx \[1, 3\].*give the model's transformers config"):
        load(raw)
    assert load(raw | {"attn_layer_idx": []}).layer_counts() == {"mamba2": 4}  # mamba2-2.7b ships it empty


def test_a_byte_order_mark_is_read_alike_in_a_file_and_in_pasted_text():
    text = '\ufeff{"model_type": "llama", "hidden_size": 64}'
    assert parse_json(text, "pasted") == parse_json(text.encode("utf-8"), "uploaded") == {
        "model_type": "llama", "hidden_size": 64,
    }  # fmt: skip


def test_a_config_that_gives_no_sizes_says_its_figures_are_transformers_defaults():
    """{"model_type": "llama"} resolves to transformers' default Llama (32 layers, 4,096 wide): sized without a word,
    it read as a model. It now says so; a real config leaving out a size equal to its class default (Gemma 3's
    text_config has no num_attention_heads) does not."""
    from core.model.loading import load_model

    bare = model_from_config({"model_type": "llama"}, "bare")
    assert any("neither its layer count nor its hidden size" in n and "num_hidden_layers 32" in n for n in bare.notes)
    assert not any("transformers' defaults" in n for n in load_model("google/gemma-3-4b-it").notes)


@pytest.mark.parametrize("key", ["num_attention_heads", "num_key_value_heads"])
def test_zero_heads_are_named_not_a_division_by_zero(key):
    with pytest.raises(InputError, match=f"{key}=0 in the config: a model has at least one attention head"):
        model_from_config({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, key: 0}, "zero")


def test_a_key_given_twice_with_two_values_is_refused():
    """Python's json keeps the last of two values, other readers the first: kvscope would size a model nobody else
    reads. The same value twice is harmless (NaN included, which is not equal to itself)."""
    twice = '{"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 64, "num_hidden_layers": 1}'
    with pytest.raises(InputError, match="gives 'num_hidden_layers' twice, 32 then 1"):
        parse_json(twice, "config.json")
    assert parse_json('{"a": {"b": 1}, "a": {"b": 1}, "c": NaN, "c": NaN}', "config.json")["a"] == {"b": 1}
    nested = '{"text_config": {"hidden_size": 64, "hidden_size": 128}}'
    with pytest.raises(InputError, match="'hidden_size' twice, 64 then 128"):
        parse_json(nested, "config.json")


def test_pasted_text_beside_an_uploaded_file_is_said_to_be_unread():
    """The sidebar read the uploaded file and left pasted text unread without a word (a browser audit)."""
    from ui.inputs import config_text

    assert config_text(None, ' {"a": 1} ') == ('{"a": 1}', "")
    assert config_text(b"{}", "") == (b"{}", "")
    text, note = config_text(b"{}", '{"model_type": "llama"}')
    assert text == b"{}" and "pasted text is not read while a file is uploaded" in note


def test_a_layer_count_below_one_is_named_not_left_to_transformers():
    """num_hidden_layers -4 came back in transformers' validator's words ("must be equal to the number of
    layer_types (0)"), which say nothing of the fix."""
    for n in (-4, 0):
        with pytest.raises(InputError, match=f"num_hidden_layers={n} in the config: a model has at least one layer"):
            load(tiny_raw("qwen3", num_hidden_layers=n))
