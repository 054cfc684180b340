"""llama.cpp's cache rules and its -ngl placement per build, recomputed by hand."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.cli import main
from core.engines import engine_named
from core.engines.llamacpp import LlamaCppBuild
from core.errors import InputError
from core.fit import Setup, fit, layer_bytes
from core.memory.gpus import card_named
from core.model.loading import load_model, model_from_config
from core.model.params import count_params

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


def test_windows_only_where_llama_cpps_loader_builds_them():
    """SWA_ARCHS: phi3's loader drops the window its GGUF carries, qwen2's converter writes none (libllama agrees:
    tests/engines, phi3_swa and qwen2_swa); fit, speed and size say so, and size counts the layers as built."""
    from core.engines.llamacpp import windows_dropped
    from tests.tiny_configs import tiny_raw

    phi3 = model_from_config(tiny_raw("phi3", sliding_window=8), "phi3")
    assert phi3.layer_counts() == {"sliding_window": 2}  # transformers keeps the window
    assert LLAMA.account(phi3, 4096).total == 4096 * 2 * 2 * 2 * 16 * 2  # 2 layers × K,V × 2 heads × 16 wide × f16
    assert "phi3's sliding windows are full attention there" in windows_dropped(phi3)
    gemma = load_model("google/gemma-3-12b-it")
    assert not windows_dropped(gemma) and LLAMA.account(gemma, 32768).total < 48 * 32768 * 2 * 8 * 256 * 2
    assert windows_dropped(load_model("meta-llama/Llama-3.1-8B-Instruct")) == ""  # no window to drop


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


# --- -ngl placement by build (core.engines.llamacpp.Offload, LlamaCppBuild) ------------------------------------------

OLD = LLAMA.with_options(build=LlamaCppBuild.parse("b6500"))  # before PR #18148


@pytest.mark.parametrize(
    ("ngl", "new", "old"),
    [
        # hand-worked from src/llama-model.cpp load_tensors for 48 decoder layers:
        # from PR #18148 i_gpu_start = 49 - ngl over 49 slots (slot 48 = output); before, i_gpu_start = 48 - ngl
        # and the output only when ngl > 48
        (0, (range(48, 48), False), (range(48, 48), False)),
        (1, (range(48, 48), True), (range(47, 48), False)),
        (10, (range(39, 48), True), (range(38, 48), False)),
        (48, (range(1, 48), True), (range(0, 48), False)),
        (49, (range(0, 48), True), (range(0, 48), True)),
        (999, (range(0, 48), True), (range(0, 48), True)),
        (None, (range(0, 48), True), (range(0, 48), True)),
    ],
)
def test_ngl_counts_the_output_layer_first_from_pr_18148(ngl, new, old):
    assert (LLAMA.offload(ngl, 48).layers, LLAMA.offload(ngl, 48).output) == new
    assert (OLD.offload(ngl, 48).layers, OLD.offload(ngl, 48).output) == old


def test_experts_in_ram_are_those_of_gpu_layers_under_either_convention():
    # --n-cpu-moe 40 with -ngl 10: only the GPU layers' experts are overridden (the others are in RAM anyway)
    assert LLAMA.offload(10, 48, range(40)).cpu_experts == range(39, 40)
    assert OLD.offload(10, 48, range(40)).cpu_experts == range(38, 40)


@pytest.mark.parametrize(
    ("spec", "shown", "output_first", "fit_streams", "f16_mask"),
    [
        ("b6500", "b6500", False, False, False),
        ("6500", "b6500", False, False, False),
        (" B7414 ", "b7414", False, False, False),  # issue #18085's build (2025-12-16), before PR #18148
        ("b7524", "b7524", True, False, False),  # issue #18337's build (2025-12-24), after it
        ("b10509", "b10509", True, False, True),  # issue #27447's (2026-08-20), before PR #27496, after PR #23764
        ("2025-09-01", "2025-09-01", False, False, False),
        ("2025-12-17", "2025-12-17", False, False, False),
        ("2025-12-18", "2025-12-18", True, False, False),  # PR #18148's merge day
        ("2026-05-27", "2026-05-27", True, False, True),  # PR #23764's
        ("2026-08-21", "2026-08-21", True, True, True),
    ],
)
def test_build_numbers_and_dates_choose_the_rules(spec, shown, output_first, fit_streams, f16_mask):
    assert LlamaCppBuild.parse(spec) == LlamaCppBuild(shown, output_first, fit_streams, f16_mask)


def test_default_build_is_the_bundled_one():
    assert LLAMA.options.build == LlamaCppBuild() and LlamaCppBuild().spec == "0c1e57098"
    assert LlamaCppBuild().output_first and LlamaCppBuild().fit_streams and LlamaCppBuild().f16_mask  # every PR


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("b7480", r"b7480: kvscope cannot tell whether it has PR #18148.*b7414 lacks it and b7524 carries it"),
        ("b10600", r"PR #27496.*no later build number is known here.*release date"),
        ("b0", r"build numbers start at b1"),
        ("latest", r"neither a build number \(b6500 or 6500\) nor a release date"),
        ("2025-02-30", r"neither a build number"),
        ("2025-9-1", r"neither a build number"),
        ("b1234567", r"neither a build number"),
    ],
)
def test_malformed_or_unplaceable_builds_are_refused(spec, message):
    with pytest.raises(InputError, match=message):
        LlamaCppBuild.parse(spec)


def test_the_fit_weighs_the_layers_the_build_puts_on_the_gpu():
    s = Setup(load_model("Qwen/Qwen3-8B"), LLAMA, card_named("RTX 4090"), weights="q8_0", gpu_layers=10)
    dense, routed, output = layer_bytes(count_params(s.model), "q8_0", 2)
    n = len(dense)
    assert fit(s, [4096]).weights_bytes == sum(dense[n - 9 :]) + sum(routed[n - 9 :]) + output
    assert fit(replace(s, engine=OLD), [4096]).weights_bytes == sum(dense[n - 10 :]) + sum(routed[n - 10 :])


def run_cli(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_cli_flag_on_fit_speed_and_autofit(capsys):
    base = ["Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--engine", "llama.cpp", "--weights", "q8_0", "-ngl", "10"]
    old = run_cli(capsys, "fit", *base, "--llamacpp-build", "6500")
    assert old["engine_options"]["build"] == {
        "spec": "b6500", "output_first": False, "fit_streams": False, "f16_mask": False,
    }  # fmt: skip
    assert any("-ngl 10: the last 10 of 36 layers on the GPU;" in note for note in old["notes"])
    new = run_cli(capsys, "fit", *base)
    assert any("-ngl 10: the last 9 of 36 layers and the output layer" in note for note in new["notes"])
    assert run_cli(capsys, "speed", *base, "--llamacpp-build", "b6500")["layers_on_gpu"] == 10
    assert run_cli(capsys, "speed", *base, "--llamacpp-build", "2026-01-01")["layers_on_gpu"] == 9
    fitted = run_cli(capsys, "autofit", "Qwen/Qwen3-8B", "--gpu", "RTX 4060 8GB", "--llamacpp-build", "2026-01-01")
    assert fitted["llamacpp_build"] == "2026-01-01"


@pytest.mark.parametrize(
    ("command", "spec", "message"),
    [
        ("fit", "newest", "argument --llamacpp-build: llama.cpp build 'newest' is neither"),
        ("speed", "b7480", "argument --llamacpp-build: llama.cpp b7480: kvscope cannot tell"),
        ("autofit", "2025-13-01", "argument --llamacpp-build: llama.cpp build '2025-13-01' is neither"),
    ],
)
def test_cli_refuses_bad_builds(capsys, command, spec, message):
    args = [command, "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--llamacpp-build", spec]
    with pytest.raises(SystemExit) as exit_:
        main(args + (["--engine", "llama.cpp"] if command != "autofit" else []))
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_autofit_refuses_builds_whose_fit_is_not_modelled(capsys):
    assert main(["autofit", "Qwen/Qwen3-8B", "--gpu", "RTX 4060 8GB", "--llamacpp-build", "b6500"]) == 2
    assert "kvscope models --fit from PR #18148" in capsys.readouterr().err
