"""`python -m core ollama` and core.ollama_report: each row is Ollama's estimate, kvscope's llama.cpp account of
that split and core.speed's prediction for it, wired as stated; the speed moves the way offloading must move it; one
decode time is rebuilt by hand from the bytes left in RAM."""

from __future__ import annotations

import json
from dataclasses import replace
from fractions import Fraction
from itertools import pairwise

import pytest

from core.cli import main
from core.engines.ollama_engine import (
    LAST_GO_ENGINE,
    LLAMA_RUNNER,
    LLAMA_SERVER,
    OLLAMA_ENGINE,
    assign_layers,
    cache_bytes,
    engine_layout,
    runner,
)
from core.engines.runtimes import OllamaSettings, default_num_ctx, gguf_arch, llama_engine, ollama_layers
from core.fit import Setup, fit
from core.llamacpp_autofit import FIT_MARGIN, fit_params
from core.memory.gpus import card_named
from core.memory.quant import tensor_bytes
from core.model.loading import load_model, presets
from core.model.params import count_params
from core.ollama_report import TYPICAL_RAM_GB_S, error_short, explain, host, ollama_row, parse_free
from core.speed import calibration
from core.speed.calibration import Calibration, host_key
from core.speed.efficiency import efficiency_for, fitted
from core.speed.predict import Hardware, predict
from core.speed.ram import RamBandwidth
from core.units import GIB, MIB
from tests.test_runtimes import CARDS, MODELS

FIVE = MODELS[:5]
# Read in fs/ggml/ggml.go KV.OllamaEngineRequired @v0.12.10: llama, gemma2 and phi3 were left to the llama.cpp runner,
# which estimateGPULayers sized; qwen3 and qwen3moe went to the Go engine, which measured its own layout.
ESTIMATED = {"meta-llama/Llama-3.1-8B-Instruct", "mistralai/Mistral-7B-v0.1", "google/gemma-2-9b-it", "microsoft/phi-4"}
HW = Hardware(ram_gb_s=50.0, threads=8)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["ollama", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys, *argv: str) -> dict:
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def test_cli_rows_are_ollamas_split_kvscopes_fit_and_the_predicted_speed(capsys):
    out = cli_json(capsys, *FIVE, "--ram-gbs", str(HW.ram_gb_s), "--threads", str(HW.threads))
    rows = out["rows"]
    assert [(r["model"], r["card"]) for r in rows] == [(m, c) for m in FIVE for c in CARDS]  # the four cards
    for r in rows:
        model, card = load_model(r["model"]), card_named(r["card"])
        split = ollama_layers(model, card.memory_bytes, OllamaSettings())
        where = (r["model"], r["card"])
        # current Ollama passes no -ngl: llama-server's --fit on -c num_ctx -np 1 places the layers and experts
        engine = llama_engine(OllamaSettings())
        setup = Setup(model=model, engine=engine, card=card, weights="q4_k_m", kv_dtype=split.kv_type)
        choice = fit_params(setup, split.num_ctx, 1)
        setup = replace(setup, gpu_layers=choice.gpu_layers, cpu_experts=choice.cpu_experts)
        row = fit(setup, [split.num_ctx]).rows[0]
        speed = predict(setup, HW, split.num_ctx, 1)
        slots = len(model.layers) + 1
        assert (r["layers"], r["blocks"], r["num_ctx"], r["kv_type"]) == (
            slots if choice.gpu_layers is None else choice.gpu_layers, split.blocks, split.num_ctx, split.kv_type,
        ), where  # fmt: skip
        assert r["kvscope_gpu_bytes"] == row.total_bytes and r["kvscope_fits"] == row.fits, where
        assert r["kvscope_headroom_bytes"] == row.headroom_bytes, where
        assert r["decode_tok_s"] == pytest.approx(speed.decode_tok_s, rel=1e-12), where
        assert r["prefill_tok_s"] == pytest.approx(speed.prefill_tok_s, rel=1e-12), where
        # beside it, v0.12.10's estimate where it sized the load (the llama.cpp runner's attention-only models)
        if r["model"] in ESTIMATED:
            assert (r["estimate_layers"], r["ollama_vram_bytes"], r["ollama_total_bytes"]) == (
                split.layers, split.vram_bytes, split.total_bytes,
            ), where  # fmt: skip
        else:  # Qwen3-8B went to the Go engine then
            assert r["estimate_layers"] is None and r["ollama_vram_bytes"] is None, where


def test_parallel_requests_are_num_parallel_streams_of_num_ctx(capsys):
    """-c num_ctx × np -np np: kvscope's engine account for np sequences of num_ctx (not one of np × num_ctx)."""
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    out = cli_json(
        capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", CARDS[-1], "--num-ctx", "8k", "--num-parallel", "3"
    )
    r = out["rows"][0]
    settings = OllamaSettings(num_ctx=8192, num_parallel=3)
    setup = Setup(model, llama_engine(settings), card_named(CARDS[-1]), weights="q4_k_m")
    assert r["layers"] == len(model.layers) + 1  # every layer on the 4090, so the whole cache is on it
    one = fit(setup, [8192]).rows[0]
    three = llama_engine(settings).account(model, 8192, 3, "f16").total
    assert r["kvscope_gpu_bytes"] == one.weights_bytes + one.overhead_bytes + three
    assert three == 3 * one.cache_bytes  # separate streams: three times one sequence's cells


def test_fewer_gpu_layers_decode_slower():
    """Same card, same context: less free memory (another program on the card), Ollama's llama-server fit puts fewer
    layers on the GPU, and the layers left in RAM (50 GB/s against the 4090's 1008) slow every token. (Current
    Ollama's OLLAMA_GPU_OVERHEAD only enters its scheduler's preflight, server/sched.go; the fit keeps its 1 GiB.)"""
    model, card = load_model("microsoft/phi-4"), card_named(CARDS[-1])
    rows = [ollama_row(model, card, OllamaSettings(num_ctx=4096), hw=HW, free=gib * GIB) for gib in (23, 15, 11, 7)]
    layers = [r.layers for r in rows]
    decode = [r.decode_tok_s for r in rows]
    assert layers == sorted(layers, reverse=True) and layers[0] > layers[-1]
    assert all(a >= b for a, b in pairwise(decode)) and decode[0] > decode[-1]
    # with the split's decode ordered the same way as its layers: never faster with fewer layers
    for a, b in pairwise(rows):
        if a.layers > b.layers:
            assert a.decode_tok_s > b.decode_tok_s


def test_a_card_holding_every_layer_beats_a_split():
    model = load_model("microsoft/phi-4")
    settings = OllamaSettings(num_ctx=4096)
    split = ollama_row(model, card_named("GeForce RTX 4060 8GB"), settings, hw=HW)
    whole = ollama_row(model, card_named("GeForce RTX 3060 12GB"), settings, hw=HW)
    assert not split.full and whole.full
    assert whole.decode_tok_s > split.decode_tok_s
    # the same card with room to spare: every layer on it, and faster than the same card forced to split
    free = ollama_row(model, card_named(CARDS[-1]), settings, hw=HW)
    forced = ollama_row(model, card_named(CARDS[-1]), settings, hw=HW, free=8 * GIB)
    assert free.full and not forced.full
    assert free.decode_tok_s > forced.decode_tok_s


def test_decode_time_is_the_bytes_left_in_ram_over_its_bandwidth_plus_the_gpu_part():
    """phi-4 on an 8 GB card: Ollama's -ngl leaves the first blocks in RAM. With 32 threads the CPU side is
    bandwidth-bound, so its time is (weights of those blocks + their KV) ÷ (RAM GB/s × efficiency)."""
    model, card = load_model("microsoft/phi-4"), card_named("GeForce RTX 4060 8GB")
    hw = Hardware(ram_gb_s=20.0, threads=32)
    r = ollama_row(model, card, OllamaSettings(num_ctx=4096, flash_attention=False), hw=hw)
    assert not r.full and 0 < r.layers < r.blocks
    cfg = model.config
    sizes = tensor_bytes(count_params(model), "q4_k_m", 2)
    # llama.cpp's -ngl N (N ≤ blocks) puts the output layer and the last N − 1 blocks on the GPU: the first
    # blocks − (N − 1) stay in RAM
    kept = r.blocks - (r.layers - 1)
    in_ram = sum(size for t, size in sizes if t.layer is not None and t.layer < kept)
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_per_layer = 4096 * 2 * cfg["num_key_value_heads"] * head_dim * 2  # cells × (K + V) × heads × dim × f16
    in_ram += kept * kv_per_layer
    # flash attention is off (OLLAMA_FLASH_ATTENTION=0): each block writes its f32 scores and reads them back,
    # KQ then softmax, 4 × 4 B per head per cached token (llama-graph.cpp build_attn_mha, the non-flash branch)
    in_ram += kept * 16 * cfg["num_attention_heads"] * 4096
    eff = efficiency_for("llama.cpp", "cpu").bandwidth
    gpu = next(p for p in r.speed.decode.parts if p.device == "gpu")
    cpu = next(p for p in r.speed.decode.parts if p.device == "cpu")
    assert cpu.bytes == pytest.approx(in_ram, rel=1e-9)
    assert cpu.matmul_s < cpu.weights_s and cpu.attention_s < cpu.cache_s  # bandwidth-bound, as assumed
    # the GPU's part and the per-pass overhead as the speed model states them (the fitted group's, core.speed)
    by_hand = in_ram / (hw.ram_gb_s * 1e9 * eff) + gpu.seconds + r.speed.decode.overhead_s
    assert 1 / r.decode_tok_s == pytest.approx(by_hand, rel=1e-9)
    assert in_ram / (hw.ram_gb_s * 1e9 * eff) > gpu.seconds  # 9 of 40 blocks in RAM already outweigh the 31 on it


def test_every_layer_in_ram_is_not_called_a_fit(capsys):
    """OLLAMA_NUM_PARALLEL 100,000 at 4K asks llama-server for 409.6 M cells: its --fit leaves every layer, and so the
    whole cache, in system RAM. The GPU then holds only buffers, which is no answer: the row says RAM, not yes."""
    out = cli_json(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "GeForce RTX 4060 8GB", "--num-parallel",
                   "100000")  # fmt: skip
    (row,) = out["rows"]
    assert row["offloaded"] == "0/33" and row["kvscope_fits"] is None
    code, text, _ = run(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "GeForce RTX 4060 8GB", "--num-parallel",
                        "100000")  # fmt: skip
    assert code == 0 and " RAM " in text.splitlines()[5]
    model, card = load_model("meta-llama/Llama-3.1-8B-Instruct"), card_named("GeForce RTX 4060 8GB")
    lines = explain(ollama_row(model, card, OllamaSettings(num_parallel=100000), hw=HW), model)
    assert any("every layer and its cache in system RAM, which kvscope does not size" in line for line in lines)


def test_json_fields_and_the_stated_host(capsys):
    out = cli_json(capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4060 8GB")
    assert {"ollama_version", "estimator_version", "weights", "settings", "ram_gb_s", "ram_source", "threads",
            "speed_at", "note", "rows"} <= set(out)  # fmt: skip
    assert out["ram_gb_s"] == pytest.approx(2 * 8 * 5600 / 1000) == TYPICAL_RAM_GB_S  # dual-channel DDR5-5600
    assert "DDR5-5600" in out["ram_source"] and "theoretical peak" in out["ram_source"]
    assert "none checked against a running Ollama" in out["note"]
    assert out["settings"] == {"num_ctx": None, "num_parallel": 1, "kv_cache_type": "f16",
                               "flash_attention": None, "gpu_overhead": 0, "num_batch": 512, "free": None}  # fmt: skip
    (row,) = out["rows"]
    for key, kind in {"layers": int, "blocks": int, "num_ctx": int, "ollama_vram_bytes": int,
                      "ollama_total_bytes": int, "kvscope_gpu_bytes": int, "kvscope_fits": bool,
                      "decode_tok_s": float, "prefill_tok_s": float, "ttft_s": float, "offloaded": str,
                      "full_offload": bool, "kv_type": str, "flash_attention": bool}.items():  # fmt: skip
        assert isinstance(row[key], kind), key
    assert row["num_ctx"] == 4096  # an 8 GB card gets Ollama's smallest default
    # each speed figure carries its group's held-out error, as fitted.json records it
    (decode,) = [e for e in fitted()["errors"] if (e["engine"], e["backend"], e["card_class"], e["kind"])
                 == ("llama.cpp", "cuda", "consumer", "decode")]  # fmt: skip
    assert row["decode_error"]["median_abs_error"] == decode["median"]
    assert row["decode_error"]["held_out_rows"] == decode["rows"] > 0
    assert "consumer cards" in row["decode_error"]["label"] and "prefill" in row["prefill_error"]["label"]
    assert row["decode_tok_s"] > 0 and row["prefill_tok_s"] > 0


def test_settings_and_host_reach_the_rows(capsys, monkeypatch, tmp_path):
    out = cli_json(
        capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4060 8GB", "--num-ctx", "32k", "--kv-cache-type",
        "q8_0", "--flash-attention", "on", "--gpu-overhead", "512MiB", "--ram-gbs", "40", "--threads", "12",
    )  # fmt: skip
    (row,) = out["rows"]
    settings = OllamaSettings(num_ctx=32768, kv_cache_type="q8_0", flash_attention=True, gpu_overhead=512 << 20)
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    split = ollama_layers(model, card_named("RTX 4060 8GB").memory_bytes, settings)
    assert (row["num_ctx"], row["kv_type"], row["estimate_layers"]) == (32768, "q8_0", split.layers)
    assert (row["ram_gb_s"], row["threads"], out["settings"]["gpu_overhead"]) == (40.0, 12, 512 << 20)
    # "measured" asks core.speed.ram (stubbed here: a test must not time this machine's RAM)
    monkeypatch.setattr("core.speed.cli.ram_bandwidth", lambda: RamBandwidth(33.0, 11.0, 8, "measured (stub)"))
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    hw, source = host("measured")
    assert (hw.ram_gb_s, hw.ram_thread_gb_s, hw.calibration) == (33.0, 11.0, None)
    assert source == "measured (stub); one thread 11.0 GB/s" and hw.ram_stream_gb_s == min(33.0, hw.threads * 11.0)
    # once this host is calibrated (python -m core calibrate), "measured" is its calibration, rates and all
    cal = Calibration(host_key(), "2026-01-01T00:00:00Z", "stand-in", 21.0, 4, (("Q4_K_M", 2.0, 9.0),))
    calibration.store(cal)
    hw, source = host("measured")
    assert (hw.ram_gb_s, hw.threads, hw.calibration, source) == (21.0, 4, cal, cal.label)
    assert host("measured", threads=12)[0].threads == 12


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["Qwen/Qwen3-8B", "--kv-cache-type", "q5_1"], "OLLAMA_KV_CACHE_TYPE 'q5_1'"),
        (["Qwen/Qwen3-8B", "--ram-gbs", "fast"], "a number of GB/s or 'measured'"),
        (["Qwen/Qwen3-8B", "--ram-gbs", "-5"], "positive"),
        (["Qwen/Qwen3-8B", "--ram-gbs", "nan"], "positive"),
        (["Qwen/Qwen3-8B", "--gpu", "RTX 9999"], "unknown card"),
        (["Qwen/Qwen3-8B", "--weights", "zz"], "unknown weight format"),
    ],
)
def test_bad_input_is_a_clean_message(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["Qwen/Qwen3-8B", "--gpu-overhead", "1GB"], "cannot read '1GB' as a size"),
        (["Qwen/Qwen3-8B", "--num-ctx", "0"], "token count must be positive"),
        (["Qwen/Qwen3-8B", "--num-parallel", "0"], "must be positive"),
        (["Qwen/Qwen3-8B", "--flash-attention", "auto"], "invalid choice"),
    ],
)
def test_bad_flag_values_are_refused_by_the_parser(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        main(["ollama", *argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_text_table_names_the_split_and_the_host(capsys):
    code, out, _ = run(capsys, "microsoft/phi-4", "--num-ctx", "4k")
    assert code == 0
    split = ollama_layers(load_model("microsoft/phi-4"), card_named(CARDS[0]).memory_bytes, OllamaSettings(4096))
    line = next(line for line in out.splitlines() if CARDS[0] in line)
    assert f"{split.layers}/{split.blocks + 1}" in line
    assert "89.6 GB/s" in out and "none checked against a running Ollama" in out
    assert "error bar: decode ±" in out and "held-out decode runs of llama.cpp CUDA on consumer cards" in out
    assert sum(card in out for card in CARDS) == 4


def test_current_ollama_column_is_llama_servers_fit_of_the_same_request():
    """Current Ollama passes -c num_ctx × np -np np and no -ngl: the row's fit column must be fit_params on that
    request, and its speed predict() on that split."""
    hw = Hardware(ram_gb_s=50.0, threads=8)
    for name, card_name in [("microsoft/phi-4", "GeForce RTX 4060 8GB"), ("Qwen/Qwen3-8B", "GeForce RTX 4090 24GB")]:
        model, card = load_model(name), card_named(card_name)
        settings = OllamaSettings(num_parallel=2)
        r = ollama_row(model, card, settings, hw=hw)
        setup = replace(r.fit.setup, gpu_layers=None)
        choice = fit_params(setup, r.num_ctx * 2, 2)
        slots = len(model.layers) + 1
        assert r.layers == (slots if choice.gpu_layers is None else choice.gpu_layers)
        assert r.fit_note == "; ".join(choice.steps)
        assert choice.projected_bytes <= card.memory_bytes - FIT_MARGIN
        timed = predict(replace(setup, gpu_layers=choice.gpu_layers), hw, r.num_ctx, 1)
        assert r.decode_tok_s == timed.decode_tok_s
    moe_model = load_model("Qwen/Qwen3-30B-A3B")
    moe = ollama_row(moe_model, card_named("GeForce RTX 4060 8GB"), hw=hw)
    moe_setup = replace(moe.fit.setup, gpu_layers=None, cpu_experts=range(0))
    choice = fit_params(moe_setup, moe.num_ctx, 1)
    assert moe.fit_cpu_experts == (choice.cpu_experts.start, choice.cpu_experts.stop - 1) and moe.layers == 49
    ram = replace(moe_setup, gpu_layers=choice.gpu_layers, cpu_experts=choice.cpu_experts)
    assert moe.decode_tok_s == predict(ram, hw, moe.num_ctx, 1).decode_tok_s
    # qwen3moe went to the Go engine at v0.12.10, so no estimate beside it
    assert moe.split is None and moe.estimate_layers is None and moe.fit.setup == ram


# --- which runner, by release (read in ollama/ollama: fs/ggml/ggml.go KV.OllamaEngineRequired at each tag, and
# 9db4bdbad "use llama-server exclusively for GGML models", first released in v0.30.0) ---------------------------


@pytest.mark.parametrize(
    ("arch", "version", "new_engine", "expected"),
    [
        ("qwen3", "v0.12.10", False, OLLAMA_ENGINE),  # in the list from v0.12.9
        ("gpt-oss", "v0.12.10", False, OLLAMA_ENGINE),
        ("llama", "v0.12.10", False, LLAMA_RUNNER),
        ("llama", "v0.24.0", True, OLLAMA_ENGINE),  # registered in model/models: OLLAMA_NEW_ENGINE opts in
        ("falcon-h1", "v0.24.0", True, LLAMA_RUNNER),  # not registered: compatibility mode
        ("deepseek2", "v0.12.10", False, LLAMA_RUNNER),
        ("deepseek2", "v0.13.0", False, OLLAMA_ENGINE),  # added in v0.13.0
        ("bert", "v0.13.4", False, LLAMA_RUNNER),
        ("bert", "v0.13.5", False, OLLAMA_ENGINE),
        ("lfm2", "v0.14.2", False, LLAMA_RUNNER),
        ("lfm2", "v0.14.3", False, OLLAMA_ENGINE),
        ("qwen3next", "v0.15.4", False, LLAMA_RUNNER),
        ("qwen3next", "v0.15.5", False, OLLAMA_ENGINE),
        ("qwen35", "v0.17.0", False, LLAMA_RUNNER),
        ("qwen35", "v0.17.1", False, OLLAMA_ENGINE),
        ("nemotron_h", "v0.17.1", False, OLLAMA_ENGINE),
        ("gemma4", "v0.19.0", False, LLAMA_RUNNER),
        ("gemma4", "v0.20.0", False, OLLAMA_ENGINE),
        ("granitehybrid", "v0.24.0", False, LLAMA_RUNNER),  # never in the list
        ("qwen35", "v0.30.0", False, LLAMA_SERVER),
        ("llama", "v0.32.15", True, LLAMA_SERVER),
    ],
)
def test_runner_by_release_follows_the_source(arch, version, new_engine, expected):
    chosen = runner(arch, version, new_engine)
    assert chosen.name == expected
    assert version in chosen.why or "v0.30.0" in chosen.why


def test_every_preset_gets_a_runner_and_a_reason_now_and_at_the_last_go_engine_release():
    expected_then = {"qwen3": OLLAMA_ENGINE, "qwen35": OLLAMA_ENGINE, "deepseek2": OLLAMA_ENGINE, "llama": LLAMA_RUNNER}
    for name in presets():
        arch = gguf_arch(load_model(name, isolated=True))
        assert runner(arch).name == LLAMA_SERVER and "9db4bdbad" in runner(arch).why
        then = runner(arch, LAST_GO_ENGINE)
        assert then.name == expected_then.get(arch, then.name) and arch in then.why


# --- the Go engine's memory (kvcache/*.go at v0.24.0), by hand from each model's config ----------------------------


def test_go_engine_cache_of_a_sliding_window_model():
    """gpt-oss: NewSWAMemCache(window, 4096): its sliding layers keep 4,096 tokens + one batch, not the 128 window."""
    model = load_model("openai/gpt-oss-20b")
    cfg = model.config
    per_token = 2 * cfg["num_key_value_heads"] * cfg["head_dim"] * 2  # K + V, f16
    sliding = [t == "sliding_attention" for t in cfg["layer_types"]]
    kv = cache_bytes(model.layers, "gpt-oss", "f16", 8192, 1, 512)
    for is_sliding, got in zip(sliding, kv, strict=True):
        assert got == (4096 + 512 if is_sliding else 8192) * per_token
    assert sum(kv) == 12 * 8192 * 2048 + 12 * 4608 * 2048 == 314_572_800
    # A published load of gpt-oss:20b at num_ctx 8192 (Ollama 0.11, f16 cache: flash attention was off) logs
    # memory.required.kv="300.0 MiB" (github.com/ollama/ollama/issues/11711): the estimator's gptoss case sized the
    # sliding layers the way the engine's cache holds them
    assert round(sum(kv) / MIB, 1) == 300.0
    # two sequences: 2 × 4,096 + 512 cells; a context no longer than 4,096: the full array
    two = cache_bytes(model.layers, "gpt-oss", "f16", 8192, 2, 512)
    assert {two[i] for i, s in enumerate(sliding) if s} == {(2 * 4096 + 512) * per_token}
    assert set(cache_bytes(model.layers, "gpt-oss", "f16", 4096, 1, 512)) == {4096 * per_token}
    # gemma 3: NewSWACache(window): window + batch, padded to 256
    gemma = load_model("google/gemma-3-12b-it")
    g = gemma.config
    window = g["sliding_window"]
    g_token = 2 * g["num_key_value_heads"] * g["head_dim"] * 2
    g_kv = cache_bytes(gemma.layers, "gemma3", "f16", 32768, 1, 512)
    assert min(g_kv) == -(-(window + 512) // 256) * 256 * g_token and max(g_kv) == 32768 * g_token


def test_go_engine_cache_of_a_hybrid():
    """Qwen3.5: attention layers over num_ctx cells; Gated DeltaNet layers a conv state of (kernel − 1) × channels and
    a (v_dim × v_dim × v_heads) state, F32, kept 25 times (24 checkpoints, recurrent_checkpoints.go)."""
    model = load_model("Qwen/Qwen3.5-9B")
    c = model.config
    attn = 4096 * 2 * c["num_key_value_heads"] * c["head_dim"] * 2
    channels = (
        2 * c["linear_num_key_heads"] * c["linear_key_head_dim"]
        + c["linear_num_value_heads"] * c["linear_value_head_dim"]
    )
    conv = (c["linear_conv_kernel_dim"] - 1) * channels * 4
    state = c["linear_value_head_dim"] ** 2 * c["linear_num_value_heads"] * 4
    kv = cache_bytes(model.layers, "qwen35", "f16", 4096, 1, 512)
    assert sorted(set(kv)) == sorted({attn, 25 * (conv + state)})
    assert sum(kv) == 8 * 16 * MIB + 24 * 25 * (98_304 + 2 * MIB) == 1_451_491_328
    # a second sequence doubles both: attention cells and recurrent slots
    assert sum(cache_bytes(model.layers, "qwen35", "f16", 4096, 2, 512)) == 2 * sum(kv)


def test_go_engine_cache_of_mla_keeps_the_latent_as_k_and_v():
    model = load_model("deepseek-ai/DeepSeek-V2-Lite")
    c = model.config
    per_token = (c["kv_lora_rank"] + c["qk_rope_head_dim"]) * 2 + c["kv_lora_rank"] * 2
    assert set(cache_bytes(model.layers, "deepseek2", "f16", 4096, 1, 512)) == {4096 * per_token}
    assert per_token == 2176


def test_go_engine_layout_places_from_the_last_layer_and_drops_the_output_layer_first():
    # blocks 3, 3, 3 and an output layer of 5 into 10: 5 + 3 fit, 3 does not; again without the output: 3 blocks
    assert assign_layers([3, 3, 3, 5], 10) == 3
    assert assign_layers([3, 3, 3, 5], 14) == 4
    assert assign_layers([3, 3, 3, 5], 2) == 0
    layout = engine_layout([3 * MIB] * 3, 5 * MIB, [0] * 3, 10 * MIB + 457 * MIB + 4 * MIB, 4 * MIB)
    assert (layout.layers, layout.full, layout.vram_bytes) == (3, False, 4 * MIB + 457 * MIB + 9 * MIB)


# --- every model, the app's default on the four cards, free memory ------------------------------------------------


def test_every_bundled_preset_answers_on_the_cli(capsys):
    names = sorted(presets())
    out = cli_json(capsys, *names)
    assert [(r["model"], r["card"]) for r in out["rows"]] == [(m, c) for m in names for c in CARDS]
    for r in out["rows"]:
        assert r["runner"] == LLAMA_SERVER and 0 <= r["layers"] <= r["blocks"] + 1 and r["decode_tok_s"] > 0
        assert (r["go_layers"] is None) == (r["go_runner"] != OLLAMA_ENGINE)


def test_the_apps_default_hybrid_on_four_cards(capsys):
    code, text, _ = run(capsys, "Qwen/Qwen3.5-9B")
    assert code == 0 and "Qwen/Qwen3.5-9B: llama-server: Ollama v0.32.15 runs llama-server for every GGUF" in text
    out = cli_json(capsys, "Qwen/Qwen3.5-9B")
    model = load_model("Qwen/Qwen3.5-9B")
    for r in out["rows"]:
        card = card_named(r["card"])
        num_ctx = default_num_ctx(card.memory_bytes)
        setup = Setup(model, llama_engine(OllamaSettings()), card, weights="q4_k_m", kv_dtype="f16")
        choice = fit_params(setup, num_ctx, 1)
        assert r["num_ctx"] == num_ctx
        assert r["layers"] == (choice.n_layers + 1 if choice.gpu_layers is None else choice.gpu_layers)
        assert r["ollama_vram_bytes"] is None and r["go_runner"] == OLLAMA_ENGINE
        kv = cache_bytes(model.layers, "qwen35", "f16", num_ctx, 1, 512)
        assert r["go_kv_bytes"] == sum(kv)


def test_free_memory_is_what_the_split_goes_into(capsys):
    free = parse_free("5.5GiB")
    assert free == int(Fraction(55, 10) * GIB) and parse_free("900MiB") == 900 * MIB and parse_free(" ") is None
    name, card = "meta-llama/Llama-3.1-8B-Instruct", CARDS[0]
    (r,) = cli_json(capsys, name, "--gpu", card, "--free", "5.5GiB")["rows"]
    split = ollama_layers(load_model(name), free, OllamaSettings(), total_bytes=card_named(card).memory_bytes)
    assert (r["estimate_layers"], r["free_bytes"], r["num_ctx"]) == (split.layers, free, 4096)
    assert r["layers"] < cli_json(capsys, name, "--gpu", card)["rows"][0]["layers"]
    # --gpu-mem-gib: the named card's speed, that total memory: 48 GiB earns the 256K default (capped by the model)
    (big,) = cli_json(capsys, name, "--gpu", CARDS[-1], "--gpu-mem-gib", "48")["rows"]
    assert big["card_memory_bytes"] == 48 * GIB and big["num_ctx"] == load_model(name).max_context
    # autofit --free: llama-server's limit is the free memory less its 1 GiB margin
    code = main(["autofit", name, "--gpu", card, "--free", "5.5GiB", "--json"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and (record["card_memory_bytes"], record["limit_bytes"]) == (free, free - FIT_MARGIN)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["Qwen/Qwen3-8B", "--free", "9GiB", "--gpu", "RTX 4060 8GB"], "at most the GeForce RTX 4060 8GB's 8.00 GiB"),
        (["Qwen/Qwen3-8B", "--free", "7.1GB"], "cannot read free memory"),
        (["Qwen/Qwen3-8B", "--free", "0"], "must be positive"),
        # a card by its memory alone cannot be timed: the message names the two figures to add
        (["Qwen/Qwen3-8B", "--gpu-mem-gib", "16"], "give its bandwidth in GB/s and dense 16-bit peak in TFLOPS"),
    ],
)
def test_bad_free_memory_is_a_clean_message(capsys, argv, message):
    assert main(["ollama", *argv]) != 0
    assert message in capsys.readouterr().err


def test_the_gpu_overhead_says_what_it_moves_in_current_ollama(capsys):
    """OLLAMA_GPU_OVERHEAD does not reach llama-server's --fit in current Ollama (only the default num_ctx and a
    log line), so the layers column stays put: the report says so where the setting is given, not as if ignored."""
    args = ["ollama", "Qwen/Qwen3-8B", "--gpu", "GeForce RTX 4060 8GB", "--ram-gbs", "40", "--threads", "8"]
    assert main(args) == 0
    plain = capsys.readouterr().out
    assert main([*args, "--gpu-overhead", "2GiB"]) == 0
    given = capsys.readouterr().out
    assert "llama-server's --fit, which places the layers, is not told of it" in given
    assert "is not told of it" not in plain


def test_a_partly_offloaded_split_says_its_fit_is_the_gpus_part():
    """Llama-3.1-70B on a 24 GB card: llama-server's --fit keeps 45 of 81 layers in system RAM; "fits" is the GPU's
    part, and the explanation says the rest and its cache are not sized (the host's RAM is not kvscope's)."""
    model = load_model("meta-llama/Llama-3.1-70B-Instruct")
    row = ollama_row(model, card_named("RTX 4090"), OllamaSettings(), hw=HW)
    assert row.kvscope_fits is True and not row.full
    left = row.blocks + 1 - row.layers
    assert any(
        f"the GPU's part only: {left} of 81 layers and their cache stay in system RAM" in x for x in explain(row, model)
    )


def test_the_estimates_f16_cache_under_a_q8_0_setting_is_explained():
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    row = ollama_row(model, card_named("RTX 4090"), OllamaSettings(kv_cache_type="q8_0"), hw=HW)
    assert row.kv_type == "q8_0" and row.split.kv_type == "f16"  # v0.32.15 passes it; v0.12.10 sized it f16
    (line,) = [x for x in explain(row, model) if "KV per layer" in x]
    assert "× 2 B (f16)" in line and "OLLAMA_KV_CACHE_TYPE q8_0 needs flash attention, which v0.12.10 left off" in line


def test_an_error_bar_that_does_not_cover_the_split_is_marked(capsys):
    """Qwen3-32B on an 8 GB card runs 45 of 64 layers on the CPU; the group's held-out runs all had the whole model on
    the card, so its '±6 %' cell is starred and the JSON says what is not covered."""
    out = cli_json(capsys, "Qwen/Qwen3-32B", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "GeForce RTX 4060 8GB")
    split, whole = out["rows"]
    assert "layers run on the CPU from system RAM" in split["decode_error"]["caveat"]
    assert whole["decode_error"]["caveat"] is None
    assert error_short(split["decode_error"]).endswith(" *") and not error_short(whole["decode_error"]).endswith("*")
    code, text, _ = run(capsys, "Qwen/Qwen3-32B", "--gpu", "GeForce RTX 4060 8GB")
    assert code == 0 and "*: the group's held-out runs do not cover all of this figure" in text
