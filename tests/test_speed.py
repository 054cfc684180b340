"""core.speed: the bytes and FLOPs of a pass worked out by hand for a dense, a sliding-window, an MoE and a hybrid
model, and the shapes every speed curve must have."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from itertools import pairwise

import pytest

from core.engines import configured, engine_named
from core.errors import InputError
from core.fit import Setup
from core.memory.gpus import Card, card_named
from core.model.loading import load_model, model_from_config
from core.model.whatif import all_full_attention
from core.speed import Hardware, Weights, efficiencies, experts_touched, predict, setup_weights
from core.speed.work import attended_sum, decode_work, prefill_work
from tests.test_cli import run_cli
from tests.tiny_configs import tiny_raw

HF = engine_named("transformers")
LLAMA = engine_named("llama.cpp")
HOST = Hardware(ram_gb_s=50.0, threads=8)


def tiny(model_type: str):
    return model_from_config(tiny_raw(model_type, tie_word_embeddings=False, torch_dtype="bfloat16"), model_type)


def weights_of(model) -> Weights:
    return setup_weights(Setup(model, HF, Card.custom(1), weights="bf16"))


# Tiny llama (tests/tiny_configs.py): hidden 64, MLP 96, 4 query heads, 2 KV heads of 16, vocab 96, 2 layers, bf16.
# Per layer: q 64·64 + k 32·64 + v 32·64 + o 64·64 + gate/up/down 3·96·64 + two norms of 64 = 30,848 parameters.
LLAMA_LAYER = 64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 3 * 96 * 64 + 2 * 64
# Output head 96·64 + final norm 64 (the input embedding is a lookup, not read whole).
HEAD = 96 * 64 + 64
KV_ROW = 2 * (2 * 16) * 2  # K and V rows of 2 heads × 16, bf16: 128 B per token per layer
PER_KEY = 2 * 4 * (16 + 16)  # q·k and p·v for 4 query heads of 16: 256 FLOPs per cached key


def test_dense_decode_bytes_and_flops_by_hand():
    assert LLAMA_LAYER == 30_848
    model = tiny("llama")
    for batch in (1, 3):
        work = decode_work(model, HF, weights_of(model), 100, batch, "auto")
        weights = 2 * (2 * LLAMA_LAYER + HEAD)  # dense: read once per step whatever the batch
        cache = 2 * KV_ROW * 100 * batch  # each sequence reads its own 100 cached tokens on both layers
        assert work.bytes == weights + cache == (135_808 + 25_600 * batch)
        flops = 2 * (2 * LLAMA_LAYER + HEAD) * batch + 2 * PER_KEY * 100 * batch
        assert work.flops == flops == 187_008 * batch


def test_sliding_window_reads_and_attends_only_the_window():
    model = tiny("mistral")  # the same tensors as the tiny llama, both layers windowed at 8 tokens
    work = decode_work(model, HF, weights_of(model), 100, 1, "auto")
    # transformers keeps window − 1 = 7 tokens; the query attends those and its own: 8 keys
    assert [w.cache_bytes for w in work.layers] == [7 * KV_ROW] * 2
    assert [w.attention_flops for w in work.layers] == [8 * PER_KEY] * 2
    assert work.bytes == 2 * (2 * LLAMA_LAYER + HEAD) + 2 * 7 * KV_ROW == 137_600
    # llama.cpp loads Mistral without its window: 256 cells (f16) and all 100 keys
    work = decode_work(model, LLAMA, weights_of(model), 100, 1, "auto")
    assert [w.cache_bytes for w in work.layers] == [256 * KV_ROW] * 2
    assert [w.attention_flops for w in work.layers] == [100 * PER_KEY] * 2


def test_prefill_attention_is_a_triangle_for_full_layers_and_a_band_for_windows():
    assert attended_sum(10, None) == 55
    assert attended_sum(20, 8) == 36 + 12 * 8
    dense, sliding = tiny("llama"), tiny("mistral")
    work = prefill_work(dense, HF, weights_of(dense), 0, 10, "auto")
    assert work.flops == 2 * 2 * LLAMA_LAYER * 10 + 2 * HEAD + 2 * PER_KEY * 55
    work = prefill_work(sliding, HF, weights_of(sliding), 0, 20, "auto")
    assert sum(w.attention_flops for w in work.layers) == 2 * PER_KEY * 132
    # in chunks of 8 the weights are read once per chunk (3 chunks) and the attention is unchanged
    chunked = prefill_work(sliding, HF, weights_of(sliding), 0, 20, "auto", chunk=8)
    assert sum(w.weight_bytes for w in chunked.layers) == 3 * 2 * 2 * LLAMA_LAYER
    assert sum(w.attention_flops for w in chunked.layers) == 2 * PER_KEY * 132


def test_moe_reads_the_experts_a_batch_is_expected_to_touch():
    assert experts_touched(8, 2, 1) == 2
    assert experts_touched(8, 2, 4) == pytest.approx(8 * (1 - 0.75**4))  # 5.47 of 8
    assert experts_touched(8, 2, 10_000) == pytest.approx(8)
    model = tiny("gpt_oss")  # 4 experts, top 2, on each of 3 layers
    weights = weights_of(model)
    # experts per layer: gate_up 192×64 (+ bias 192), down 64×96 (+ bias 64), bf16: 37,376 B each
    expert = 2 * (192 * 64 + 192 + 64 * 96 + 64)
    one = decode_work(model, HF, weights, 64, 1, "auto")
    four = decode_work(model, HF, weights, 64, 4, "auto")
    for a, b in zip(one.layers, four.layers, strict=True):
        # one token reads its 2 experts; four tokens are expected to touch 4·(1 − ½⁴) = 3.75 of them
        assert b.weight_bytes - a.weight_bytes == pytest.approx((3.75 - 2) * expert)
        assert b.matmul_flops == 4 * a.matmul_flops  # FLOPs follow top-k per token, not the experts touched


# Tiny Qwen3.5: 3 Gated DeltaNet layers (2 key heads of 8, 4 value heads of 12, conv 4) and 1 full-attention layer
# (4 query heads, 2 KV heads of 32, gated query), hidden 64, MLP 96.
GDN_LAYER = 4 + 4 + 320 + 80 * 64 + 48 * 64 + 4 * 64 + 4 * 64 + 12 + 64 * 48 + 3 * 96 * 64 + 2 * 64
ATTN_LAYER = 256 * 64 + 64 * 64 + 64 * 64 + 64 * 128 + 32 + 32 + 3 * 96 * 64 + 2 * 64
GDN_STATE = 80 * 4 * 2 + 4 * 8 * 12 * 4  # conv window (bf16, all 4 columns) + recurrent state (fp32)


def test_hybrid_decode_bytes_and_flops_by_hand():
    model = tiny("qwen3_5_text")
    work = decode_work(model, HF, weights_of(model), 100, 1, "auto")
    weights = 2 * (3 * GDN_LAYER + ATTN_LAYER + HEAD)
    state = 3 * 2 * GDN_STATE  # read and written every step
    cache = 100 * 2 * (2 * 32) * 2  # only the attention layer grows
    assert work.bytes == weights + state + cache == 337_912
    attention = 100 * 2 * 4 * (32 + 32)
    recurrent = 3 * (2 * 80 * 4 + 6 * 4 * 8 * 12)
    assert work.flops == 2 * (3 * GDN_LAYER + ATTN_LAYER + HEAD) + attention + recurrent == 359_288
    # the state does not grow: 10× the context adds only the attention layer's cache
    longer = decode_work(model, HF, weights_of(model), 1000, 1, "auto")
    assert longer.bytes - work.bytes == 900 * 2 * (2 * 32) * 2


# --- shapes ---------------------------------------------------------------------------------------------------

A100 = card_named("A100 80GB PCIe")
QWEN3 = load_model("Qwen/Qwen3-8B")
QWEN35 = load_model("Qwen/Qwen3.5-9B")
CONTEXTS = (1024, 4096, 16384, 32768, 65536, 131072)


def decode_curve(model, engine="vllm", card=A100, hw=HOST, **kw) -> list[float]:
    setup = Setup(model, configured(engine), card, **kw)
    weights = setup_weights(setup)
    return [predict(setup, hw, n, weights=weights).decode_tok_s for n in CONTEXTS]


@pytest.mark.parametrize("engine", ["vllm", "llama.cpp", "transformers"])
def test_more_context_is_never_faster_decode(engine):
    for model in (QWEN3, QWEN35):
        curve = decode_curve(model, engine)
        assert all(a >= b for a, b in pairwise(curve)), curve
        assert curve[0] > curve[-1]  # every one of them has a growing cache


def test_hybrid_decode_falls_more_slowly_than_its_full_attention_skeleton():
    hybrid, skeleton = decode_curve(QWEN35), decode_curve(all_full_attention(QWEN35))
    assert hybrid[-1] / hybrid[0] > skeleton[-1] / skeleton[0]
    # at 1K the hybrid's fixed state (read and written each step) costs about what the skeleton's short cache does;
    # from there on the skeleton's cache grows four times as fast
    assert all(h > s for h, s in zip(hybrid[1:], skeleton[1:], strict=True))


def test_prefill_per_token_cost_grows_faster_for_dense_than_hybrid():
    def prefill(model):
        setup = Setup(model, configured("vllm"), A100)
        return [predict(setup, HOST, n).prefill_tok_s for n in (8192, 65536)]

    dense, hybrid = prefill(QWEN3), prefill(QWEN35)
    assert dense[1] < dense[0]  # the causal triangle
    assert hybrid[1] / hybrid[0] > dense[1] / dense[0]


def test_batch_one_decode_is_memory_bound_and_long_prefill_compute_bound():
    s = predict(Setup(QWEN3, configured("vllm"), A100), HOST, 32768)
    assert s.bound == "memory" and s.prefill.bound == "compute"
    assert s.ttft_s == s.prefill.seconds > 0
    # aggregate grows with the batch while each sequence slows
    b8 = predict(Setup(QWEN3, configured("vllm"), A100), HOST, 32768, batch=8)
    assert b8.aggregate_tok_s > s.aggregate_tok_s and b8.decode_tok_s < s.decode_tok_s


def test_layers_left_in_ram_slow_decode_down():
    card = card_named("RTX 4060 8GB")
    hw = Hardware(ram_gb_s=60.0, threads=8)
    speeds = []
    for ngl in (33, 24, 16, 8, 0):
        setup = Setup(QWEN35, configured("llama.cpp"), card, weights="q4_k_m", gpu_layers=ngl)
        speeds.append(predict(setup, hw, 8192).decode_tok_s)
    assert all(a > b for a, b in pairwise(speeds)), speeds
    cpu = predict(Setup(QWEN35, configured("llama.cpp"), card, weights="q4_k_m"), replace(hw, cpu_only=True), 8192)
    # RAM at 60 GB/s against the card's 272 (4.5×); the fitted CUDA bandwidth share and the CPU's (a fitted figure
    # above 1, see efficiencies.json) narrow it, still past 2×
    assert cpu.decode_tok_s < speeds[0] / 2


def test_ram_bandwidth_moves_cpu_decode_in_proportion_when_memory_bound():
    setup = Setup(QWEN3, configured("llama.cpp"), A100, weights="q4_k_m")
    slow = predict(setup, Hardware(ram_gb_s=20.0, threads=64, cpu_only=True), 4096)
    fast = predict(setup, Hardware(ram_gb_s=40.0, threads=64, cpu_only=True), 4096)
    assert slow.bound == "memory"
    assert fast.decode.memory_s == pytest.approx(slow.decode.memory_s / 2)


def test_a_card_without_figures_cannot_be_timed():
    with pytest.raises(InputError, match="bandwidth"):
        predict(Setup(QWEN3, configured("vllm"), Card.custom(80)), HOST, 4096)


def test_every_efficiency_says_where_it_comes_from():
    table = efficiencies()
    assert {("llama.cpp", "cpu"), ("transformers", "cpu"), ("vllm", "gpu")} <= set(table)
    for eff in table.values():
        assert eff.status in ("fitted", "assumed") and eff.provenance
        assert 0 < eff.bandwidth <= 1.5 and eff.decode_compute > 0 and eff.overhead_step_s >= 0
        if eff.status == "fitted":  # fitted on one subset, checked on another
            assert eff.fitted_on and eff.checked_on and eff.fitted_on != eff.checked_on


# --- command line ------------------------------------------------------------------------------------------------


def test_cli_speed_json_fields():
    proc = run_cli(
        "speed", "Qwen/Qwen3-8B", "--gpu", "A100 80GB PCIe", "--engine", "vllm",
        "--context", "32k", "--context", "40960", "--batch", "1", "--batch", "4", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert [(r["context"], r["batch"]) for r in out["rows"]] == [(32768, 1), (32768, 4), (40960, 1), (40960, 4)]
    for r in out["rows"]:
        assert {"decode_tok_s", "aggregate_tok_s", "prefill_tok_s", "ttft_s", "bytes_per_step", "bound"} <= set(r)
        assert r["aggregate_tok_s"] == pytest.approx(r["decode_tok_s"] * r["batch"], rel=1e-3)
    assert out["rows"][0]["decode_tok_s"] > out["rows"][2]["decode_tok_s"]
    assert out["efficiencies"]["gpu"]["status"] in ("fitted", "assumed")


def test_cli_speed_cpu_uses_the_given_ram_bandwidth_and_threads():
    args = ("speed", "Qwen/Qwen3-8B", "--device", "cpu", "--engine", "llama.cpp", "--weights", "Q4_K_M", "--json")
    slow = json.loads(run_cli(*args, "--ram-gbs", "20", "--threads", "16").stdout)
    fast = json.loads(run_cli(*args, "--ram-gbs", "80", "--threads", "16").stdout)
    assert slow["ram_gb_s"] == 20 and slow["threads"] == 16 and slow["layers_on_gpu"] == 0
    assert fast["rows"][0]["decode_tok_s"] > 2 * slow["rows"][0]["decode_tok_s"]
    both = run_cli("speed", "Qwen/Qwen3-8B", "--device", "cpu", "--gpu", "H100", "--ram-gbs", "20")
    assert both.returncode == 2 and "--device cpu" in both.stderr


def test_fp8_weights_run_matmuls_on_fp8_peak_but_attention_stays_bf16():
    h100 = card_named("H100")
    bf16 = predict(Setup(QWEN3, configured("vllm"), h100, weights="bf16"), HOST, 65536)
    fp8 = predict(Setup(QWEN3, configured("vllm"), h100, weights="fp8"), HOST, 65536)
    assert (h100.fp8_tflops, h100.bf16_tflops) == (1979, 989)  # dense figures from the card data
    gpu8, gpu16 = fp8.prefill.parts[0], bf16.prefill.parts[0]
    # same FLOPs (FP8 weights, same count), twice the rate
    assert gpu8.matmul_flops == gpu16.matmul_flops
    assert gpu8.matmul_s == pytest.approx(gpu16.matmul_s * 989 / 1979, rel=1e-3)
    assert gpu8.attention_s == pytest.approx(gpu16.attention_s)
    assert 1 < fp8.prefill_tok_s / bf16.prefill_tok_s < 2


def test_a_cpu_whose_name_hides_its_model_is_told_apart_by_family_model_and_vector_isa():
    from core.speed.ram import cpu_name

    vm = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu\n" * 2
    assert cpu_name(vm) == "AMD EPYC (family 25, model 1)"
    zen4 = vm.replace("model\t\t: 1", "model\t\t: 17")
    assert cpu_name(zen4) == "AMD EPYC (family 25, model 17)"
    # the same family and model with and without AVX-512 (a hypervisor may hide it): two names, two calibrations
    assert cpu_name(zen4.replace(": fpu", ": fpu avx2 avx512f avx512bw")) == "AMD EPYC (family 25, model 17, AVX-512)"
    assert cpu_name(zen4.replace(": fpu", ": fpu avx avx2 fma")) == "AMD EPYC (family 25, model 17, AVX2)"
    named = vm.replace("AMD EPYC", "AMD Ryzen 9 7950X")
    assert cpu_name(named) == "AMD Ryzen 9 7950X"  # a name with a model number is kept as it is


def test_a_cpus_clock_is_read_from_cpuinfo_where_it_gives_one():
    from core.speed.ram import cpu_mhz

    vm = "processor\t: 0\nmodel name\t: AMD EPYC\ncpu MHz\t\t: 2445.424\n\nprocessor\t: 1\ncpu MHz\t: 1.0\n"
    assert cpu_mhz(vm) == 2445.424  # the first processor's
    assert cpu_mhz("processor\t: 0\nmodel name\t: Apple M2\n") is None  # Arm kernels print no clock
    assert cpu_mhz("processor\t: 0\ncpu MHz\t: unknown\n") is None


def test_more_threads_than_this_host_has_are_refused_unless_the_ram_is_another_machines():
    """Threads scale a CPU figure; past this host's cores, with this host's RAM figure, they described no machine
    (64 threads on a 2-core VM read 32× the prefill)."""
    cores = os.cpu_count() or 1
    base = ("speed", "Qwen/Qwen3-8B", "--device", "cpu", "--context", "4k", "--threads", str(cores + 1))
    refused = run_cli(*base)
    assert refused.returncode != 0
    assert f"--threads {cores + 1} is more than this host's {cores} cores" in refused.stderr
    assert "give its --ram-gbs too" in refused.stderr and "Traceback" not in refused.stderr
    assert run_cli(*base, "--ram-gbs", "80").returncode == 0


def test_a_gpu_prefill_rate_is_traced_to_every_factor_it_takes():
    """The shown matmul share (× 0.8206) was the fitted rate × the GEMM fill × the format family's factor (k-quant
    then; legacy on the RTX 3060's class since the refit of 2026-12-07), and the factor was printed on CPUs only:
    0.851 × 512/549.7 gave 0.7926 (a browser audit)."""
    from core.engines import configured
    from core.fit import Setup
    from core.memory.gpus import card_named
    from core.model.loading import load_model
    from core.speed import Hardware, predict
    from core.speed.predict import fill
    from core.speed.report import speed_lines

    setup = Setup(load_model("Qwen/Qwen3-8B"), configured("llama.cpp", "ollama"), card_named("RTX 3060 12GB"),
                  weights="q4_0")  # fmt: skip
    s = predict(setup, Hardware(ram_gb_s=50, threads=8), 32768)
    (part,) = s.prefill.parts
    eff = part.efficiency
    factor = eff.family_factor("legacy", True, "")
    share = eff.prefill_compute * fill(eff, s.prefill.parts[0].pass_tokens) * factor
    line = next(line for line in speed_lines(s) if "legacy kernels" in line)
    assert factor != 1 and f"× {share:.4g}) =" in line and f"legacy kernels at {factor:.5g}×" in line
