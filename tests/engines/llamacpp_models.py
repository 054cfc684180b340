"""The tiny configs the llama.cpp referee converts to GGUF, derived from kvscope's own (tests/tiny_configs.py).

Changes from `tiny_raw`, each because llama.cpp needs it:
- attention head_dim 32 (and MLA's kv_lora_rank 64 + rope 32): a q8_0/q4_0 cache needs every K and V head to be a
  whole number of 32-value blocks (llama-context.cpp, llama_init_from_model: "K cache type ... does not divide").
- Granite-4.0-H hidden 128 with Mamba2 heads of 32, Nemotron-H 8 Mamba2 heads: the converter asserts that the SSM
  inner width is a multiple of 64 (conversion/granite.py).
- Gated DeltaNet key and value heads of one width (16): llama.cpp sizes both from ssm_d_state
  (models/qwen35.cpp, qwen3next.cpp: `head_v_dim = hparams.ssm_d_state`); 2 key heads vs 4 value heads stay unequal.
- LFM2 and Jamba hidden 128: llama.cpp takes its attention head width as hidden / heads (no key_length in its GGUF).
- Nemotron-H's pattern "ME*E": with experts the converter picks NEMOTRON_H_MOE, whose MLP blocks are "E" (a "-"
  block would be read as Mamba2 and lack its tensors).
- Gemma 3 comes twice: with llama.cpp's own pattern (every 6th layer global) and with kvscope's tiny pattern 3,
  which the GGUF cannot carry (conversion/gemma.py writes no pattern; models/gemma3.cpp assumes 6).
- DeepSeek-V2 (no q_lora_rank) is left out: llama.cpp reads q_lora_rank unless the model has 26 or 27 layers
  (models/deepseek2.cpp, `is_lite`); DeepSeek-V3 covers MLA.
Widths stay unequal (kv heads ≠ heads, conv channels ≠ hidden) so a rule that swaps two fields fails.
"""

from __future__ import annotations

from typing import Any

from tests.tiny_configs import BASE, WINDOW, tiny_raw

_HD = {"head_dim": 32}
_GDN = {"linear_key_head_dim": 16, "linear_value_head_dim": 16}

MODELS: dict[str, dict[str, Any]] = {
    "llama": tiny_raw("llama", **_HD),
    "llama_mha": tiny_raw("llama", num_key_value_heads=4, **_HD),
    "mistral": tiny_raw("mistral", **_HD),
    "gemma3": tiny_raw("gemma3_text", num_hidden_layers=7, sliding_window_pattern=6, **_HD),
    "gemma3_pattern3": tiny_raw("gemma3_text", **_HD),
    "gpt_oss": tiny_raw("gpt_oss", **_HD),
    "llama4": tiny_raw("llama4_text", **_HD),
    "deepseek_v3": tiny_raw("deepseek_v3", kv_lora_rank=64, qk_rope_head_dim=32),
    "qwen3_5": tiny_raw("qwen3_5_text", **_GDN),
    "qwen3_next": tiny_raw("qwen3_next", **_GDN),
    "granite_h": tiny_raw("granitemoehybrid", hidden_size=128, mamba_d_head=32),
    "nemotron_h": tiny_raw("nemotron_h", mamba_num_heads=8, hybrid_override_pattern="ME*E", **_HD),
    "lfm2": tiny_raw("lfm2", hidden_size=128, **_HD),
    "falcon_h1": tiny_raw("falcon_h1", **_HD),
    "jamba": tiny_raw("jamba", hidden_size=128, **_HD),
    "mamba": tiny_raw("mamba"),
    # sliding windows in the config that llama.cpp's loader does not build (core.engines.llamacpp.SWA_ARCHS): phi3's
    # drops the window its GGUF carries; qwen2's converter writes none. Hidden 128: heads 32 wide (hidden ÷ heads)
    "phi3_swa": tiny_raw("phi3", sliding_window=WINDOW, hidden_size=128),
    "qwen2_swa": {
        "model_type": "qwen2", **BASE, "hidden_size": 128, "num_hidden_layers": 2, "use_sliding_window": True,
        "sliding_window": WINDOW, "max_window_layers": 0,
    },
}  # fmt: skip
