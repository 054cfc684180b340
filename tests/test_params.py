"""Parameter counts equal the parameters of the model transformers builds from the same config, exactly.

Models are built on the meta device, so even DeepSeek-V3 and Kimi-K2 cost no memory; tied weights are one
parameter in `model.parameters()`, so the sum counts unique tensors.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

from core.errors import InputError  # noqa: E402
from core.model.config import from_mamba_ssm  # noqa: E402
from core.model.loading import load_model, model_from_config, presets  # noqa: E402
from core.model.params import count_params, tensors_of  # noqa: E402
from tests.tiny_configs import BASE, TINY, tiny_raw  # noqa: E402

# Variants the shared tiny set leaves out: more families, biases on, MoE placement rules, Zamba2 with two shared
# blocks and adapters, Nemotron-H's latent MoE, LFM2's auto-adjusted MLP width.
EXTRA: dict[str, dict] = {
    "mixtral": {"num_hidden_layers": 2, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2": {"num_hidden_layers": 2},
    "qwen2_moe": {
        "num_hidden_layers": 3,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48,
        "decoder_sparse_step": 2,
        "mlp_only_layers": [2],
    },
    "qwen3_moe": {
        "num_hidden_layers": 3,
        "head_dim": 16,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "mlp_only_layers": [0],
    },
    "gemma": {"num_hidden_layers": 2, "head_dim": 16},
    "olmo2": {"num_hidden_layers": 2},
    "olmo3": {"num_hidden_layers": 2, "sliding_window": 8},
    "granite": {"num_hidden_layers": 2, "attention_bias": True, "mlp_bias": True},
    "cohere2": {"num_hidden_layers": 2, "sliding_window": 8},
    "lfm2_moe": {
        "num_hidden_layers": 3,
        "layer_types": ["conv", "full_attention", "conv"],
        "num_dense_layers": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
    },
    "lfm2": {
        "num_hidden_layers": 2,
        "layer_types": ["conv", "full_attention"],
        "block_auto_adjust_ff_dim": True,
        "block_ffn_dim_multiplier": 1.5,
        "block_multiple_of": 32,
        "conv_bias": True,
    },
    "zamba2": {
        "num_hidden_layers": 6,
        "mamba_d_state": 8,
        "n_mamba_heads": 8,
        "mamba_ngroups": 2,
        "layers_block_type": ["mamba", "hybrid", "hybrid", "mamba", "hybrid", "hybrid"],
        "num_mem_blocks": 2,
        "use_shared_attention_adapter": True,
        "adapter_rank": 8,
        "add_bias_linear": True,
    },
    "llama": {"num_hidden_layers": 2, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True},
    "deepseek_v3": TINY["deepseek_v3"]
    | {"num_hidden_layers": 3, "first_k_dense_replace": 2, "n_shared_experts": 2, "attention_bias": True},
    "nemotron_h": TINY["nemotron_h"] | {"moe_latent_size": 16, "mlp_bias": True, "use_bias": True},
    "falcon_h1": {
        "num_hidden_layers": 2,
        "mamba_d_state": 8,
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_d_ssm": 128,
        "mamba_n_groups": 2,
        "mamba_rms_norm": True,
        "projectors_bias": True,
        "mamba_proj_bias": True,
        "attention_bias": True,
        "mlp_bias": True,
    },
    "mamba": {"num_hidden_layers": 2, "state_size": 8, "use_bias": True, "use_conv_bias": False, "time_step_rank": 6},
    "granitemoehybrid": {
        "num_hidden_layers": 2,
        "layer_types": ["mamba", "attention"],
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_n_groups": 2,
        "mamba_d_state": 8,
        "num_local_experts": 0,
        "shared_intermediate_size": 64,
        "mamba_proj_bias": True,
        "attention_bias": True,
    },
}


def built_params(raw: dict) -> int:
    """Unique parameters of the transformers model for a raw config (its text decoder for multimodal configs)."""
    raw = from_mamba_ssm(raw)
    # Kimi-K2 is DeepSeek-V3-shaped (its checkpoint's architectures say DeepseekV3ForCausalLM); transformers
    # has no kimi_k2 type.
    model_type = "deepseek_v3" if raw["model_type"] == "kimi_k2" else raw["model_type"]
    fields = {k: v for k, v in raw.items() if k != "model_type" and not k.startswith("_")}
    config = AutoConfig.for_model(model_type, **fields).get_text_config(decoder=True)
    if "tie_word_embeddings" in raw:  # a multimodal config's top-level flag is the one its checkpoint obeys
        config.tie_word_embeddings = raw["tie_word_embeddings"]
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_tiny_counts_equal_transformers(model_type):
    raw = tiny_raw(model_type)
    assert count_params(model_from_config(raw, model_type)).total == built_params(raw)


@pytest.mark.parametrize("model_type", sorted(EXTRA))
def test_variant_counts_equal_transformers(model_type):
    raw = {"model_type": model_type, **BASE, **EXTRA[model_type]}
    assert count_params(model_from_config(raw, model_type)).total == built_params(raw)


@pytest.mark.parametrize("name", sorted(presets()))
def test_preset_counts_equal_transformers(name):
    raw = json.loads(presets()[name].read_text())
    assert count_params(load_model(name)).total == built_params(raw)


def test_public_figures():
    # ../shared/reference/cache-layouts.md: Qwen3.5-9B text 8,953,803,264; Qwen3-8B 8,190,735,360.
    assert count_params(load_model("Qwen/Qwen3.5-9B")).total == 8_953_803_264
    assert count_params(load_model("Qwen/Qwen3-8B")).total == 8_190_735_360


def test_qwen3_30b_a3b_active_by_hand():
    h, layers, heads, kv, d, vocab = 2048, 48, 32, 4, 128, 151_936  # the preset's config.json
    experts, top_k, moe_inter = 128, 8, 768
    attention = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d  # q, k, v, o, q_norm, k_norm
    per_layer_shared = attention + 2 * h + experts * h  # + two RMSNorms + router
    expert = 3 * h * moe_inter  # gate, up, down
    embeddings = 2 * vocab * h + h  # untied embed + lm_head, final norm
    count = count_params(load_model("Qwen/Qwen3-30B-A3B"))
    assert count.active == embeddings + layers * (per_layer_shared + top_k * expert)
    assert count.experts == layers * experts * expert
    assert count.total == embeddings + layers * (per_layer_shared + experts * expert)
    assert 3.3e9 < count.active < 3.4e9  # the model card's "3.3B activated"


def test_categories_add_up_and_tying_drops_the_head():
    for name in ("Qwen/Qwen3.5-35B-A3B", "google/gemma-3-4b-it", "deepseek-ai/DeepSeek-V3"):
        c = count_params(load_model(name))
        assert c.total == c.embedding + c.lm_head + c.linear + c.experts + c.router + c.other
        assert c.total == sum(t.numel for t in c.tensors)
    gemma = count_params(load_model("google/gemma-3-4b-it"))  # tied
    assert gemma.lm_head == 0 and gemma.experts == 0 and gemma.active == gemma.total
    llama = count_params(load_model("meta-llama/Llama-3.1-8B-Instruct"))
    assert llama.lm_head == llama.embedding == 128_256 * 4096


def test_unknown_architecture_is_an_input_error():
    with pytest.raises(InputError, match=r"'bert'.*supported: .*llama"):
        tensors_of({"model_type": "bert", "hidden_size": 64, "layer_types": ["full_attention"]})
