"""Tiny configs of every architecture kvscope sizes: every layer kind present, windows small enough to exceed.

Widths are deliberately unequal (kv heads ≠ heads, odd conv channels) so a formula that swaps two fields fails.
"""

from __future__ import annotations

from typing import Any

BASE: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 96,
    "max_position_embeddings": 512,
}
WINDOW = 8

_GDN = {
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 12,
    "linear_conv_kernel_dim": 4,
}
_MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
_DS = {
    "num_key_value_heads": 4,
    "head_dim": 8,
    "kv_lora_rank": 24,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "moe_intermediate_size": 32,
    "n_group": 1,
    "topk_group": 1,
}

TINY: dict[str, dict[str, Any]] = {
    "llama": {"num_hidden_layers": 2, "head_dim": 16},
    "qwen3": {"num_hidden_layers": 2, "head_dim": 24},
    "phi3": {"num_hidden_layers": 2, "pad_token_id": 0},
    "mistral": {"num_hidden_layers": 2, "head_dim": 16, "sliding_window": WINDOW},
    "gemma2": {"num_hidden_layers": 3, "head_dim": 16, "sliding_window": WINDOW},
    "gemma3_text": {"num_hidden_layers": 4, "head_dim": 16, "sliding_window": WINDOW, "sliding_window_pattern": 3},
    "gpt_oss": {
        "num_hidden_layers": 3,
        "head_dim": 16,
        "sliding_window": WINDOW,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    },
    "llama4_text": {
        "num_hidden_layers": 4,
        "head_dim": 16,
        "attention_chunk_size": WINDOW,
        "num_local_experts": 2,
        "intermediate_size_mlp": 96,
        "interleave_moe_layer_step": 2,
    },
    "deepseek_v2": {"num_hidden_layers": 2, "q_lora_rank": None} | _DS,
    "deepseek_v3": {"num_hidden_layers": 2, "q_lora_rank": 16} | _DS,
    "qwen3_5_text": {"num_hidden_layers": 4, "head_dim": 32} | _GDN,
    "qwen3_5_moe_text": {"num_hidden_layers": 4, "head_dim": 32, "shared_expert_intermediate_size": 32} | _GDN | _MOE,
    "qwen3_next": {"num_hidden_layers": 4, "head_dim": 32, "shared_expert_intermediate_size": 32} | _GDN | _MOE,
    "mamba": {"num_hidden_layers": 2, "state_size": 8, "conv_kernel": 4, "expand": 2, "intermediate_size": 128},
    "falcon_mamba": {"num_hidden_layers": 2, "state_size": 8, "conv_kernel": 3, "expand": 2, "intermediate_size": 128},
    "mamba2": {
        "num_hidden_layers": 2,
        "state_size": 8,
        "conv_kernel": 4,
        "expand": 2,
        "num_heads": 8,
        "head_dim": 16,
        "n_groups": 2,
    },
    "jamba": {
        "num_hidden_layers": 4,
        "head_dim": 16,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 2,
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_dt_rank": 8,
        "use_mamba_kernels": False,
    },
    "falcon_h1": {
        "num_hidden_layers": 2,
        "head_dim": 16,
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_n_heads": 6,
        "mamba_d_head": 16,
        "mamba_n_groups": 2,
        "mamba_d_ssm": 96,
    },
    "granitemoehybrid": {
        "num_hidden_layers": 3,
        "layer_types": ["mamba", "attention", "mamba"],
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_n_heads": 8,
        "mamba_d_head": 16,
        "mamba_n_groups": 2,
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "shared_intermediate_size": 64,
    },
    "nemotron_h": {
        "num_hidden_layers": 4,
        "head_dim": 16,
        "hybrid_override_pattern": "M-*E",
        "ssm_state_size": 8,
        "conv_kernel": 4,
        "expand": 2,
        "mamba_num_heads": 6,
        "mamba_head_dim": 16,
        "n_groups": 2,
        "n_routed_experts": 2,
        "num_experts_per_tok": 1,
        "moe_intermediate_size": 32,
        "moe_shared_expert_intermediate_size": 32,
        "n_group": 1,
        "topk_group": 1,
    },
    "zamba2": {
        "num_hidden_layers": 4,
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "n_mamba_heads": 8,
        "mamba_headdim": 16,
        "mamba_ngroups": 2,
        "layers_block_type": ["mamba", "hybrid", "mamba", "hybrid"],
        "num_mem_blocks": 1,
        "use_shared_attention_adapter": False,
        "adapter_rank": 8,
    },
    "lfm2": {
        "num_hidden_layers": 3,
        "head_dim": 16,
        "layer_types": ["conv", "full_attention", "conv"],
        "conv_L_cache": 3,
        "block_ff_dim": 96,
    },
    "minimax": {
        "num_hidden_layers": 4,
        "head_dim": 16,
        "layer_types": ["linear_attention", "full_attention", "linear_attention", "full_attention"],
        "num_local_experts": 2,
        "num_experts_per_tok": 1,
        "block_size": 8,
    },
}


def tiny_raw(model_type: str, **overrides: Any) -> dict[str, Any]:
    """A raw config.json dict, as a checkpoint would ship it."""
    return {"model_type": model_type, **BASE, **TINY[model_type], **overrides}
