"""Tiny config.json files for the vLLM referee, derived from kvscope's own tiny configs (tests/tiny_configs.py).

vLLM needs two things the shared tiny configs leave out: `architectures` (which model class to build) and a
checkpoint dtype. A few widths are changed where vLLM's CPU kernels refuse the shared ones, always keeping
unequal widths so a formula that swaps two fields still fails:

- vLLM's CPU causal-conv weight prepack (`causal_conv1d_weight_pack`, used for bf16 width-4 convs on AVX512-BF16
  CPUs) only takes channel counts that are multiples of 32. The shared Qwen3.5/Qwen3-Next tiny has 2·2·8 + 4·12 =
  80 conv channels; the variants use value heads of 16 (2·2·8 + 4·16 = 96).
- vLLM's Lfm2 reads `conv_dim` and `block_dim`, which transformers' Lfm2Config does not define; LFM2 checkpoints
  ship them.
- vLLM's CPU attention refuses an fp8 KV cache unless head_size is a multiple of 32 (cpu_attn.py `_get_attn_isa`);
  the fp8 cases use a 32-wide head (the 16-wide one is kept in REFUSED).
- max_position_embeddings is raised to 16384 so max_model_len can pass the windows and the block sizes.
- Nemotron-H's MoE layers cannot start on the CPU backend (see REFUSED); the compared variant has Mamba2, MLP and
  attention layers only.
- "big state" variants make one state page larger than the 128-token attention page, so that vLLM has to raise
  the attention block size (`_align_hybrid_block_size`) and pad the state pages.
"""

from __future__ import annotations

from typing import Any

from tests.tiny_configs import tiny_raw

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "lfm2": "Lfm2ForCausalLM",
}

GDN_CPU = {"linear_value_head_dim": 16}  # conv channels 2·2·8 + 4·16 = 96, a multiple of 32
# recurrent state 16·16·32 fp32 = 32 KiB plus the conv window: more than one 128-token attention page (32 KiB)
GDN_BIG_STATE = {"linear_num_value_heads": 16, "linear_value_head_dim": 32, "linear_key_head_dim": 16}
# transformers' Lfm2Config has no conv_dim/block_dim; vLLM's Lfm2 reads both (LFM2 checkpoints ship them, = hidden)
LFM2_CONV = {"conv_dim": 64, "block_dim": 64}
# Nemotron-H without its MoE layer: vLLM's CPU fused-MoE refuses Nemotron-H's non-gated (relu²) experts
NEMOTRON_DENSE = {"hybrid_override_pattern": "M-*M"}


def vllm_config(model_type: str, **overrides: Any) -> dict[str, Any]:
    """A config.json vLLM can start from: the shared tiny config, its architecture and a bf16 checkpoint dtype."""
    raw = tiny_raw(model_type, **{"max_position_embeddings": 16384, **overrides})
    raw["architectures"] = [ARCHITECTURES[model_type]]
    raw.setdefault("torch_dtype", "bfloat16")
    return raw


MODELS: dict[str, dict[str, Any]] = {
    "llama (GQA 4q/2kv)": vllm_config("llama"),
    "llama MHA (4q/4kv)": vllm_config("llama", num_key_value_heads=4),
    "llama head 32 (GQA 4q/2kv)": vllm_config("llama", head_dim=32),
    "mistral (sliding 8)": vllm_config("mistral"),
    "gemma3 (sliding 8 + full)": vllm_config("gemma3_text"),
    "deepseek_v2 (MLA)": vllm_config("deepseek_v2"),
    "qwen3.5 (GDN + full)": vllm_config("qwen3_5_text", **GDN_CPU),
    "qwen3.5 big state": vllm_config("qwen3_5_text", **GDN_BIG_STATE),
    "qwen3-next (GDN + full, MoE)": vllm_config("qwen3_next", **GDN_CPU),
    "granite-4.0-h (Mamba2 + full)": vllm_config("granitemoehybrid"),
    "nemotron-h dense (Mamba2 + full)": vllm_config("nemotron_h", **NEMOTRON_DENSE),
    "lfm2 (short conv + full)": vllm_config("lfm2", **LFM2_CONV),
    # pipeline parallel: layer counts that do not split evenly over the stages
    "llama 3 layers": vllm_config("llama", num_hidden_layers=3),
    "deepseek_v2 (MLA) 3 layers": vllm_config("deepseek_v2", num_hidden_layers=3),
    # 9 layers, every 3rd full: groups of 3 ({0,3,6}, {1,4,7} GDN; {2,5,8} attention), PP 2 splits them [5, 4]
    # and each stage holds an attention layer (vLLM 0.32 on CPU refuses a stage of state layers only: its
    # workers then disagree on the KV cache layout)
    "qwen3.5 9 layers": vllm_config("qwen3_5_text", num_hidden_layers=9, full_attention_interval=3, **GDN_CPU),
}

# Architectures the CPU backend refuses, with the message vLLM gives (the referee checks it still refuses).
# Each is started with the given kv cache dtype.
REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "llama head 16, fp8 KV": (vllm_config("llama"), "fp8", "FP8 KV cache requires head_size divisible by 32 on CPU"),
    "nemotron-h MoE": (
        vllm_config("nemotron_h"),
        "auto",
        "is_act_and_mul=False is supported only for CUDA, XPU and ROCm",
    ),
}
