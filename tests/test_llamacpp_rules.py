"""llama.cpp's cache rules, recomputed by hand."""

from __future__ import annotations

from core.engines import engine_named
from core.model.loading import load_model

LLAMA = engine_named("llama.cpp")


def test_cells_pad_to_256_and_default_cache_is_f16():
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    per_cell = 32 * 2 * 8 * 128 * 2  # layers × (K + V) × kv heads × head_dim × f16
    account = LLAMA.account(model, 1000)
    assert account.kv_dtype == "fp16"
    assert account.total == 1024 * per_cell


def test_q8_0_and_q4_0_rows_are_block_quantised():
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    row = 8 * 128  # one K or V row per layer per cell
    assert LLAMA.kv_bytes_per_token(model, "q8_0") == 32 * 2 * (row // 32) * 34
    assert LLAMA.kv_bytes_per_token(model, "q4_0") == 32 * 2 * (row // 32) * 18


def test_sliding_layers_keep_window_plus_ubatch_cells():
    model = load_model("openai/gpt-oss-20b")  # window 128, 12 sliding + 12 full, 8 KV heads × 64
    per_cell = 2 * 8 * 64 * 2
    account = LLAMA.account(model, 131072)
    swa_cells = 768  # pad(128 + 512, 256)
    assert account.total == 12 * per_cell * 131072 + 12 * per_cell * swa_cells
    full = LLAMA.with_options(swa_full=True).account(model, 131072)
    assert full.total == 24 * per_cell * 131072


def test_recurrent_state_is_f32_with_d_conv_minus_one_columns_whatever_the_kv_type():
    model = load_model("Qwen/Qwen3.5-9B")
    conv = (2 * 16 * 128 + 32 * 128) * 3 * 4
    ssm = 32 * 128 * 128 * 4
    assert LLAMA.fixed_bytes_per_sequence(model, "q4_0") == 24 * (conv + ssm)
    assert LLAMA.fixed_bytes_per_sequence(model, "auto") == 24 * (conv + ssm)


def test_mla_keeps_only_the_latent():
    model = load_model("deepseek-ai/DeepSeek-V3")
    assert LLAMA.kv_bytes_per_token(model) == 61 * 576 * 2


def test_mistral_ggufs_have_no_sliding_window():
    model = load_model("mistralai/Mistral-7B-v0.1")  # sliding_window 4096 in its config
    per_cell = 32 * 2 * 8 * 128 * 2
    assert LLAMA.account(model, 32768).total == 32768 * per_cell
    # transformers honours the window
    assert engine_named("transformers").account(model, 32768).total == 4095 * per_cell


def test_the_swa_cache_keeps_the_requested_cache_type():
    """llama-kv-cache-iswa.cpp builds the SWA cache with the same type_k/type_v as the base cache (PR 21277 kept it
    F16 and was reverted by PR 21332); the referee's Gemma 3 / gpt-oss q8_0 and q4_0 cases show it."""
    model = load_model("openai/gpt-oss-20b")
    row = 8 * 64
    q8 = LLAMA.account(model, 131072, kv_dtype="q8_0")
    full_line = next(line for line in q8.lines if line.label == "full_attention")
    swa_line = next(line for line in q8.lines if line.label.startswith("sliding_window"))
    assert full_line.bytes_per_token == 2 * (row // 32) * 34
    assert swa_line.bytes_per_token == 2 * (row // 32) * 34
    assert q8.total == 12 * 2 * (row // 32) * 34 * (131072 + 768)


def test_sequences_get_their_own_streams_unless_unified():
    """n_ctx = batch × context split over n_seq_max streams (llama-context.cpp) or one shared stream (kv_unified);
    the unified SWA cache holds n_swa per sequence plus one ubatch (llama-kv-cache-iswa.cpp)."""
    model = load_model("openai/gpt-oss-20b")  # 12 sliding (window 128) + 12 full, 8 KV heads × 64
    per_cell = 2 * 8 * 64 * 2
    split = LLAMA.account(model, 8000, batch=4)
    assert split.total == 12 * per_cell * 4 * (8192 + 768)
    unified = LLAMA.with_options(kv_unified=True).account(model, 8000, batch=4)
    # one stream of 4 × 8000 = 32000 cells (a multiple of 256); SWA pad(4 × 128 + 512) = 1024
    assert unified.total == 12 * per_cell * 32000 + 12 * per_cell * 1024
    caches = LLAMA.with_options(kv_unified=True).caches(model, 8000, batch=4)
    assert [(c.role, c.cells, c.streams) for c in caches] == [("base", 32000, 1), ("swa", 1024, 1)]
    odd = LLAMA.with_options(kv_unified=True).caches(model, 1000, batch=3)  # 3000 → 3072 cells
    assert [(c.role, c.cells, c.streams) for c in odd] == [("base", 3072, 1), ("swa", 1024, 1)]


def test_the_ubatch_is_capped_by_n_batch():
    model = load_model("openai/gpt-oss-20b")
    per_cell = 2 * 8 * 64 * 2
    small = LLAMA.with_options(n_batch=64).account(model, 131072)
    assert small.total == 12 * per_cell * (131072 + 256)  # pad(128 + 64, 256)


def test_front_end_defaults():
    from core.engines.llamacpp import FRONTENDS

    assert FRONTENDS["llama-server"].options.kv_unified and FRONTENDS["llama-server"].n_parallel == 4
    assert not FRONTENDS["llama-cli"].options.kv_unified and not FRONTENDS["llama-cli"].options.swa_full
    assert FRONTENDS["library"].options.swa_full
    model = load_model("openai/gpt-oss-20b")
    per_cell = 2 * 8 * 64 * 2
    assert type(LLAMA).frontend("library").account(model, 4096).total == 24 * per_cell * 4096


def test_recurrent_rollback_snapshots_only_where_llama_cpp_keeps_them():
    model = load_model("Qwen/Qwen3.5-9B")
    per_seq = 24 * ((2 * 16 * 128 + 32 * 128) * 3 * 4 + 32 * 128 * 128 * 4)
    account = LLAMA.with_options(n_rs_seq=3).account(model, 1000, batch=2)
    assert account.fixed_bytes == 2 * 4 * per_seq
    assert LLAMA.with_options(n_rs_seq=3).fixed_bytes_per_sequence(model) == 4 * per_seq


def test_gemma3_and_llama4_windows_follow_llama_cpps_fixed_patterns():
    from core.model.loading import model_from_config

    raw = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 8,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "sliding_window": 8,
        "sliding_window_pattern": 2,  # transformers: every 2nd layer global; llama.cpp: every 6th
        "vocab_size": 96,
        "intermediate_size": 96,
    }
    model = model_from_config(raw, "gemma3-pattern-2")
    assert model.layer_counts() == {"sliding_window": 4, "full_attention": 4}
    caches = LLAMA.caches(model, 4096)
    assert [(c.role, c.layers, c.cells) for c in caches] == [("base", 1, 4096), ("swa", 7, 768)]


def test_logged_llamacpp_sizes_for_gemma3_270m_are_reproduced():
    """unslothai/unsloth pull request 7530 read llama.cpp's own allocation log for gemma-3-270m (18 layers, every
    6th global, 1 KV head × 256, window 512): n_ctx 1024 over 4 slots → 1024 cells, 18.0 MiB; over 3 slots →
    1536 cells, 27.0 MiB (each slot's 342 tokens pad to 512 cells)."""
    from core.model.loading import model_from_config

    raw = {
        "model_type": "gemma3_text",
        "num_hidden_layers": 18,
        "hidden_size": 640,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "sliding_window": 512,
        "sliding_window_pattern": 6,
        "vocab_size": 262144,
        "intermediate_size": 2048,
    }
    model = model_from_config(raw, "gemma-3-270m")
    assert model.layer_counts() == {"sliding_window": 15, "full_attention": 3}
    mib = 1 << 20
    assert LLAMA.account(model, 1024 // 4, batch=4).total == 18 * mib
    assert LLAMA.account(model, -(-1024 // 3), batch=3).total == 27 * mib
