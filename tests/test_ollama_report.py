"""`python -m core ollama` and core.ollama_report: each row is Ollama's estimate, kvscope's llama.cpp account of
that split and core.speed's prediction for it, wired as stated; the speed moves the way offloading must move it; one
decode time is rebuilt by hand from the bytes left in RAM."""

from __future__ import annotations

import json
from dataclasses import replace
from itertools import pairwise

import pytest

from core.cli import main
from core.engines.runtimes import OllamaSettings, llama_engine, ollama_layers
from core.fit import Setup, fit
from core.llamacpp_autofit import FIT_MARGIN, fit_params
from core.memory.gpus import card_named
from core.memory.quant import tensor_bytes
from core.model.loading import load_model
from core.model.params import count_params
from core.ollama_report import TYPICAL_RAM_GB_S, host, ollama_row
from core.speed.efficiency import efficiency_for
from core.speed.predict import Hardware, predict
from core.units import GIB
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
    for r in (r for r in rows if r["model"] in ESTIMATED):
        model, card = load_model(r["model"]), card_named(r["card"])
        split = ollama_layers(model, card.memory_bytes, OllamaSettings())
        assert r["split_by"] == "v0.12.10 estimate"
        setup = Setup(
            model=model,
            engine=llama_engine(model, OllamaSettings()),
            card=card,
            weights="q4_k_m",
            kv_dtype=split.kv_type,
            gpu_layers=split.gpu_layers,
        )
        row = fit(setup, [split.num_ctx]).rows[0]
        speed = predict(setup, HW, split.num_ctx, 1)
        where = (r["model"], r["card"])
        assert (r["layers"], r["blocks"], r["num_ctx"], r["kv_type"]) == (
            split.layers, split.blocks, split.num_ctx, split.kv_type,
        ), where  # fmt: skip
        assert (r["ollama_vram_bytes"], r["ollama_total_bytes"]) == (split.vram_bytes, split.total_bytes), where
        assert r["kvscope_gpu_bytes"] == row.total_bytes and r["kvscope_fits"] == row.fits, where
        assert r["kvscope_headroom_bytes"] == row.headroom_bytes, where
        assert r["decode_tok_s"] == pytest.approx(speed.decode_tok_s, rel=1e-12), where
        assert r["prefill_tok_s"] == pytest.approx(speed.prefill_tok_s, rel=1e-12), where
        assert r["offloaded"] == f"{split.layers}/{len(model.layers) + 1}", where
    for r in (r for r in rows if r["model"] not in ESTIMATED):  # Qwen3-8B: current Ollama's own split
        assert r["split_by"] == "llama-server --fit" and r["ollama_vram_bytes"] is None
        assert r["layers"] == r["fit_layers"] and r["decode_tok_s"] == r["fit_decode_tok_s"]


def test_parallel_requests_are_num_parallel_streams_of_num_ctx(capsys):
    """-c num_ctx × np -np np: kvscope's engine account for np sequences of num_ctx (not one of np × num_ctx)."""
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    out = cli_json(
        capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", CARDS[-1], "--num-ctx", "8k", "--num-parallel", "3"
    )
    r = out["rows"][0]
    settings = OllamaSettings(num_ctx=8192, num_parallel=3)
    split = ollama_layers(model, card_named(CARDS[-1]).memory_bytes, settings)
    setup = Setup(model, llama_engine(model, settings), card_named(CARDS[-1]), weights="q4_k_m")
    assert split.full and r["layers"] == split.layers  # every layer on the 4090, so the whole cache is on it
    one = fit(setup, [8192]).rows[0]
    three = llama_engine(model, settings).account(model, 8192, 3, "f16").total
    assert r["kvscope_gpu_bytes"] == one.weights_bytes + one.overhead_bytes + three
    assert three == 3 * one.cache_bytes  # separate streams: three times one sequence's cells


def test_fewer_gpu_layers_decode_slower():
    """Same card, same context: OLLAMA_GPU_OVERHEAD takes memory away, Ollama puts fewer layers on the GPU, and the
    layers left in RAM (50 GB/s against the 4090's 1008) slow every token."""
    model, card = load_model("microsoft/phi-4"), card_named(CARDS[-1])
    rows = [
        ollama_row(model, card, OllamaSettings(num_ctx=4096, gpu_overhead=gib * GIB), hw=HW)
        for gib in (0, 4, 8, 12, 16)
    ]
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
    forced = ollama_row(model, card_named(CARDS[-1]), OllamaSettings(num_ctx=4096, gpu_overhead=16 * GIB), hw=HW)
    assert free.full and not forced.full
    assert free.decode_tok_s > forced.decode_tok_s


def test_decode_time_is_the_bytes_left_in_ram_over_its_bandwidth_plus_the_gpu_part():
    """phi-4 on an 8 GB card: Ollama's -ngl leaves the first blocks in RAM. With 32 threads the CPU side is
    bandwidth-bound, so its time is (weights of those blocks + their KV) ÷ (RAM GB/s × efficiency)."""
    model, card = load_model("microsoft/phi-4"), card_named("GeForce RTX 4060 8GB")
    hw = Hardware(ram_gb_s=20.0, threads=32)
    r = ollama_row(model, card, OllamaSettings(num_ctx=4096), hw=hw)
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
    eff = efficiency_for("llama.cpp", "cpu").bandwidth
    gpu = next(p for p in r.speed.decode.parts if p.device == "gpu")
    cpu = next(p for p in r.speed.decode.parts if p.device == "cpu")
    assert cpu.bytes == pytest.approx(in_ram, rel=1e-9)
    assert cpu.matmul_s < cpu.weights_s and cpu.attention_s < cpu.cache_s  # bandwidth-bound, as assumed
    by_hand = in_ram / (hw.ram_gb_s * 1e9 * eff) + gpu.seconds + efficiency_for("llama.cpp", "gpu").overhead_step_s
    assert 1 / r.decode_tok_s == pytest.approx(by_hand, rel=1e-9)
    assert in_ram / (hw.ram_gb_s * 1e9 * eff) > gpu.seconds  # 9 of 40 blocks in RAM already outweigh the 31 on it


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
    assert row["decode_tok_s"] > 0 and row["prefill_tok_s"] > 0


def test_settings_and_host_reach_the_rows(capsys, monkeypatch):
    out = cli_json(
        capsys, "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4060 8GB", "--num-ctx", "32k", "--kv-cache-type",
        "q8_0", "--flash-attention", "on", "--gpu-overhead", "512MiB", "--ram-gbs", "40", "--threads", "12",
    )  # fmt: skip
    (row,) = out["rows"]
    settings = OllamaSettings(num_ctx=32768, kv_cache_type="q8_0", flash_attention=True, gpu_overhead=512 << 20)
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    split = ollama_layers(model, card_named("RTX 4060 8GB").memory_bytes, settings)
    assert (row["num_ctx"], row["kv_type"], row["layers"]) == (32768, "q8_0", split.layers)
    assert (row["ram_gb_s"], row["threads"], out["settings"]["gpu_overhead"]) == (40.0, 12, 512 << 20)
    # "measured" asks core.speed.ram (stubbed here: a test must not time this machine's RAM)
    monkeypatch.setattr("core.speed.cli.ram_gb_s", lambda: (33.0, "measured (stub)"))
    hw, source = host("measured")
    assert (hw.ram_gb_s, source) == (33.0, "measured (stub)")


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
        assert r.fit_layers == (slots if choice.gpu_layers is None else choice.gpu_layers)
        assert r.fit_note == "; ".join(choice.steps)
        assert choice.projected_bytes <= card.memory_bytes - FIT_MARGIN
        timed = predict(replace(setup, gpu_layers=choice.gpu_layers), hw, r.num_ctx, 1)
        assert r.fit_decode_tok_s == timed.decode_tok_s
    moe_model = load_model("Qwen/Qwen3-30B-A3B")
    moe = ollama_row(moe_model, card_named("GeForce RTX 4060 8GB"), hw=hw)
    moe_setup = replace(moe.fit.setup, gpu_layers=None, cpu_experts=range(0))
    choice = fit_params(moe_setup, moe.num_ctx, 1)
    assert moe.fit_cpu_experts == (choice.cpu_experts.start, choice.cpu_experts.stop - 1) and moe.fit_layers == 49
    ram = replace(moe_setup, gpu_layers=choice.gpu_layers, cpu_experts=choice.cpu_experts)
    assert moe.fit_decode_tok_s == predict(ram, hw, moe.num_ctx, 1).decode_tok_s
    # qwen3moe went to the Go engine at v0.12.10, so no estimate: the row's split and speed are the fit's
    assert moe.split is None and moe.decode_tok_s == moe.fit_decode_tok_s and moe.fit.setup == ram
