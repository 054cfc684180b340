"""Issue 19: backends, flash attention, ubatch and threads on `python -m core speed`; the fitted per-group constants;
each speed figure's held-out error; `python -m core calibrate` per host; the corpus fit and its table."""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from core.cli import main
from core.engines import configured
from core.errors import InputError
from core.fit import Setup
from core.memory.gpus import Card, card_named, with_figures
from core.model.loading import load_model
from core.speed import Hardware, predict, untimed
from core.speed import calibration as cal_mod
from core.speed.calibration import Calibration, host_key
from core.speed.efficiency import efficiency_for, fitted, fitted_groups
from core.speed.groups import (
    CALIBRATED_CHECK,
    EXPERT_LOOP,
    GA102_FA_SHARE,
    HOPPER_MMA_SYNC_SHARE,
    MMQ_DP4A_MAX_BATCH_SIZE,
    MOE_PROMPT,
    TILED_EXPERTS,
    ErrorBar,
    MatmulPeak,
    card_class,
    checked_backend,
    default_backend,
    error_stats,
    expert_columns,
    expert_loop,
    format_family,
    matmul_peak,
    mmq_tile,
    mmq_traffic,
    mmq_traffic_bytes,
    tiled_experts,
    volta_expert_loop,
)
from core.speed.ram import RamBandwidth

ROOT = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen3-8B"


def run_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def setup_on(card: str, **options) -> Setup:
    return Setup(load_model(MODEL), configured("llama.cpp", **options), card_named(card), weights="q4_k_m")


# -- backends and card classes -------------------------------------------------------------------------------------


def test_backend_defaults_from_the_cards_vendor():
    assert default_backend(card_named("GeForce RTX 4090 24GB")) == "cuda"
    assert default_backend(card_named("Instinct MI300X 192GB")) == "rocm"
    assert default_backend(card_named("Apple M4 Max 128GB (16C CPU / 40C GPU)")) == "metal"
    assert default_backend(card_named("Intel Arc B580 12GB")) == "sycl"
    assert default_backend(Card.custom(24)) == "cuda"
    # a row of gpus.csv without a vendor: the name says AMD
    assert default_backend(card_named("AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB")) == "rocm"


@pytest.mark.parametrize(
    ("card", "backend", "klass"),
    [
        ("H100 80GB SXM5", "cuda", "datacenter"),
        ("GeForce RTX 4090 24GB", "cuda", "consumer"),
        ("RTX 6000 Ada Generation 48GB", "cuda", "workstation"),
        ("Apple M4 Max 128GB (16C CPU / 40C GPU)", "metal", "apple"),
        ("AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB", "rocm", "apu"),
        ("GeForce RTX 4090 24GB", "cpu", "cpu"),
        # llama.cpp's kernel path (ggml-cuda/mmq.cu ggml_cuda_should_use_mmq; ggml-vulkan.cpp
        # ggml_vk_khr_cooperative_matrix_support): Turing's INT8 MMA, Volta's dp4a/cuBLAS, Vulkan's matrix cores
        ("GeForce RTX 2080 Ti 11GB", "cuda", "turing"),
        ("T4 16GB", "cuda", "turing-pro"),
        ("Quadro RTX 6000 24GB", "cuda", "turing-pro"),
        ("TITAN V 12GB", "cuda", "volta"),
        ("V100 32GB SXM2", "cuda", "volta"),
        ("Tesla P40 24GB", "cuda", "pascal"),
        ("GeForce GTX 1080 Ti 11GB", "cuda", "pascal"),
        ("TITAN Xp 12GB", "cuda", "pascal"),
        ("GeForce GTX 1080 Ti 11GB", "vulkan", "no-coopmat"),
        ("GeForce RTX 4070 12GB", "vulkan", "coopmat2"),
        ("Intel Arc B580 12GB", "vulkan", "coopmat-intel"),
        ("Radeon RX 7900 XTX 24GB", "vulkan", "coopmat"),
        ("Intel Arc A750 8GB", "vulkan", "no-coopmat-intel"),
        ("Radeon RX 6700 XT 12GB", "vulkan", "no-coopmat"),
        ("GeForce GTX 1660 6GB", "vulkan", "no-coopmat"),  # Turing without tensor cores
        # on ROCm RDNA2 runs dp4a MMQ (no WMMA: ggml-cuda's amd_wmma_available is RDNA3 and 4), fitted on its own
        ("Radeon RX 6700 XT 12GB", "rocm", "no-wmma"),
        ("Radeon RX 7900 XTX 24GB", "rocm", "consumer"),
    ],
)
def test_card_classes(card, backend, klass):
    assert card_class(card_named(card), backend) == klass


def test_a_backend_that_cannot_drive_the_card_is_refused():
    with pytest.raises(InputError, match="Metal does not run on GeForce"):
        checked_backend(card_named("GeForce RTX 4090 24GB"), "metal")
    assert checked_backend(card_named("GeForce RTX 4090 24GB"), "vulkan") == "vulkan"


@pytest.mark.parametrize(
    ("fmt", "family"),
    [("Q4_K_M", "k-quant"), ("q6_k", "k-quant"), ("Q4_0", "legacy"), ("Q8_0", "legacy"), ("IQ4_XS", "i-quant"),
     ("MXFP4_MOE", "mxfp4"), ("F16", "float"), ("gguf_bf16", "float"), ("fp8", "other")],
)  # fmt: skip
def test_format_families(fmt, family):
    assert format_family(fmt) == family


# -- the flags -------------------------------------------------------------------------------------------------------


def test_speed_flags_reach_the_prediction(capsys):
    base = ["speed", MODEL, "--gpu", "GeForce RTX 4090 24GB", "--engine", "llama.cpp", "--context", "8192"]
    default = run_json(capsys, *base)
    assert (default["backend"], default["flash_attn"], default["n_ubatch"]) == ("cuda", True, 512)
    out = run_json(capsys, *base, "--backend", "vulkan", "-fa", "off", "-ub", "128")
    assert (out["backend"], out["flash_attn"], out["n_ubatch"]) == ("vulkan", False, 128)
    assert out["rows"][0]["prefill_chunk"] == 128
    assert "Vulkan" in out["rows"][0]["decode_error"]["group"]
    # a quarter of the ubatch reads the weights four times as often and fills smaller GEMMs: a slower prefill
    assert out["rows"][0]["prefill_tok_s"] < default["rows"][0]["prefill_tok_s"]


def test_ubatch_above_the_batch_runs_as_the_batch_unless_b_is_raised(capsys):
    """llama.cpp runs min(n_batch, n_ubatch) tokens a pass (llama-context.cpp): -ub 4096 under llama-cli's -b 2048
    times 2,048-token passes; with -b 4096 too, 4,096."""
    base = ["speed", MODEL, "--gpu", "GeForce RTX 4090 24GB", "--engine", "llama.cpp", "-ub", "4096", "--context", "8k"]
    alone, raised = run_json(capsys, *base), run_json(capsys, *base, "-b", "4096")
    assert alone["n_ubatch"] == 2048 and alone["rows"][0]["prefill_chunk"] == 2048
    assert raised["n_ubatch"] == 4096 and raised["rows"][0]["prefill_chunk"] == 4096


def test_backend_errors_and_cpu_backend(capsys):
    assert main(["speed", MODEL, "--gpu", "GeForce RTX 4090 24GB", "--backend", "rocm"]) == 2
    assert "ROCm does not run on" in capsys.readouterr().err
    out = run_json(capsys, "speed", MODEL, "--backend", "cpu", "--engine", "llama.cpp", "--ram-gbs", "50",
                   "--threads", "4", "--context", "4096")  # fmt: skip
    assert out["device"] == "cpu" and out["backend"] == "cpu" and out["threads"] == 4


@pytest.mark.parametrize("engine", ["vllm", "transformers"])
def test_a_ggml_backend_under_another_engine_is_refused_with_the_reason(capsys, engine):
    # vLLM and transformers run an NVIDIA card on CUDA whatever --backend says: a Vulkan figure would be llama.cpp's
    base = ["speed", MODEL, "--gpu", "GeForce RTX 4090 24GB", "--engine", engine, "--context", "4096"]
    assert main([*base, "--backend", "vulkan"]) == 2
    err = capsys.readouterr().err
    assert "picks one of llama.cpp's ggml backends" in err and f"{engine} runs GeForce RTX 4090 24GB on CUDA" in err
    assert "Traceback" not in err
    assert run_json(capsys, *base, "--backend", "cuda")["backend"] == "cuda"  # its own backend, said outright


# -- fitted constants and error bars ---------------------------------------------------------------------------------


def test_fitted_constants_load_and_win_over_the_priors():
    groups = fitted_groups()
    assert groups, "core/speed/fitted.json holds no group: run tests/bench/fit_corpus.py"
    (engine, backend, klass), entry = next(iter(groups.items()))
    assert entry.status == "fitted" and entry.backend == backend and entry.fitted_on
    assert efficiency_for(engine, "gpu", backend, klass) == entry
    prior = efficiency_for("transformers", "gpu", "cuda", "datacenter")  # no transformers group: the prior stays
    assert prior.status == "assumed"
    # a class with too few fit rows for its own entry takes its backend's pooled one
    if ("llama.cpp", "cuda", "volta") not in groups:
        assert efficiency_for("llama.cpp", "gpu", "cuda", "volta") == groups[("llama.cpp", "cuda", "*")]


def test_a_speed_carries_its_groups_held_out_error():
    errors = {(e["engine"], e["backend"], e["card_class"], e["kind"]): e for e in fitted()["errors"]}
    s = predict(setup_on("GeForce RTX 4090 24GB"), Hardware(50.0, 8), 4096)
    key = ("llama.cpp", "cuda", "consumer", "decode")
    assert s.error is s.decode_error and s.decode_error.kind == "decode" and s.prefill_error.kind == "prefill"
    if key in errors:
        assert s.decode_error.rows == errors[key]["rows"] and s.decode_error.median == errors[key]["median"]
        assert f"{errors[key]['rows']} held-out decode runs" in s.decode_error.label
    # a group nobody measured says so: Vulkan on Apple silicon (Metal is its backend)
    apple = predict(setup_on("M2 Ultra 76C"), Hardware(50.0, 8, backend="vulkan"), 4096)
    assert not apple.decode_error.checked and apple.decode_error.label.startswith("not checked")


def test_intel_cards_default_backend_sycl_carries_its_measured_error():
    """SYCL, the backend kvscope assumes for Intel cards, has published runs since 2026-12-07 (an Arc Pro B70, a
    B580, A770s), so its figures carry a held-out error instead of 'not checked'. Its prompts were timed at the XMX
    peak and read 5.8x fast: ggml-sycl keeps MMQ off, and a default build (GGML_SYCL_F16 off) converts a prompt's
    weights to FP32 for an FP32 GEMM on the vector ALUs. Timed at the FP32 peak, they read within about a fifth."""
    b70 = card_named("Intel Arc Pro B70 32GB")
    peak = matmul_peak(b70, "sycl", "q4_k_m", 512)
    assert math.isclose(peak.scale, 22.94 / 183.5) and "GGML_SYCL_F16" in peak.why
    assert matmul_peak(b70, "sycl", "q4_k_m", 8).scale == 1.0  # its mat-vec kernels up to 8 tokens
    assert matmul_peak(b70, "sycl", "bf16", 512).scale == 1.0  # BF16 goes to oneDNN as BF16
    assert matmul_peak(b70, "vulkan", "q4_k_m", 512).scale == 1.0  # Vulkan's cooperative matrices reach the XMX
    s = predict(setup_on("Intel Arc B580 12GB"), Hardware(50.0, 8), 4096)
    assert s.decode_error.checked and s.prefill_error.checked and "SYCL" in s.prefill_error.label
    assert s.prefill_error.median < 0.35 and s.decode_error.median < 0.2


def test_error_label_wording():
    bar = ErrorBar("decode", "llama.cpp CUDA on consumer cards", rows=48, median=0.12, within=0.9, ratio=0.95)
    assert bar.label == "±12 % typical, 48 held-out decode runs of llama.cpp CUDA on consumer cards"
    assert ErrorBar("prefill", "x").label == "not checked: no held-out published prefill runs of x"
    one = ErrorBar("prefill", "x", rows=1, median=0.015, within=1.0, ratio=0.985)
    assert one.label == "±2 % on only 1 held-out prefill run of x, too few to call it typical"
    assert one.short == "±2 % (1 held-out run)"


def test_an_unfitted_or_cross_checked_engine_states_its_error_on_the_seeds_figures_of_its_group():
    """transformers' efficiencies are assumed, so no held-out error exists; vLLM's are fitted on all its few
    published runs, each lab's runs checked by a fit on the others' (fit_corpus.cross_checked). For both, the seeds'
    published A100 figures are a check too, with the speed corpus' cross-checked vLLM runs of the group (fitted.json
    keeps their ratios): the error bar of an A100 figure is their pooled median error, less the figures the file
    marks out of it (a source contradicting itself, a kernel kvscope does not model). Other cards stay "not
    checked"."""
    from core.speed.cli import error_record
    from core.speed.efficiency import fitted
    from core.speed.published import published

    def corpus(engine: str, kind: str) -> list[float]:
        keys = [(e["engine"], e["backend"], e["card_class"], e["kind"]) for e in fitted()["errors"]]
        entries = [
            e for e, k in zip(fitted()["errors"], keys, strict=True) if k == (engine, "cuda", "datacenter", kind)
        ]
        return [x for e in entries for x in e.get("ratios", ())]

    def speed(engine: str, card: str):
        setup = Setup(load_model("Qwen/Qwen3.5-9B"), configured(engine), card_named(card), weights="bf16")
        return predict(setup, Hardware(50.0, 8), 32768)

    # (figures, figures left in): vLLM's 32K pair contradicts its 40K pair; transformers' Qwen3.5 prompts ran a slow
    # fallback kernel
    counts = {("vllm", "decode"): (4, 2), ("transformers", "decode"): (2, 2), ("transformers", "prefill"): (4, 2)}
    for (engine, kind), (n_lines, n_used) in counts.items():
        lines = [r for r in published() if (r["setup"]["engine"], r["metric"]) == (engine, f"{kind}_tok_s")]
        used = [r for r in lines if r.get("in_error_bar", True)]
        assert (len(lines), len(used)) == (n_lines, n_used)
        runs = corpus(engine, kind)
        errors = [abs(r["kvscope"]["predicted"] / r["value"] - 1) for r in used] + [abs(x - 1) for x in runs]
        bar = getattr(speed(engine, "A100 80GB PCIe"), f"{kind}_error")
        basis = "cross-checked" if engine == "vllm" else "published"
        assert bar.basis == basis and bar.rows == len(errors)
        assert bar.median == pytest.approx(statistics.median(errors), abs=2e-3)  # the file keeps 3 decimals
        assert f"{len(errors)} {basis} {kind} runs of {engine} CUDA on datacenter cards" in bar.label
        assert "never fitted" in bar.label and f"{len(used)} figures from the seeds" in bar.label
        assert (f"{len(runs)} run" in bar.label) == bool(runs)
        record = error_record(bar)
        assert record["basis"] == basis and record["held_out_rows"] == 0 and record["rows"] == len(errors)
    assert corpus("vllm", "decode")  # vllm-gpustack-qwen3-8b-h100: an H100 SXM5 run of the group
    assert not speed("vllm", "GeForce RTX 4090 24GB").decode_error.checked
    assert speed("llama.cpp", "A100 80GB PCIe").decode_error.basis == "held-out"


def test_the_seeds_figures_carry_the_prediction_kvscope_makes_now():
    """The error bars above read the prediction stored beside each figure; a change to the speed model that moves
    one must rewrite them (`python tests/bench/published_speed.py --write`)."""
    from core.speed.published import published
    from tests.bench.published_speed import predicted

    for r in published():
        assert predicted(r) == pytest.approx(r["kvscope"]["predicted"], rel=2e-3, abs=0.06), r["model"]


def test_flash_attention_off_slows_attention_by_the_fitted_factor():
    table_on = efficiency_for("llama.cpp", "gpu", "cuda", "consumer")
    eff = replace(table_on, flash_off=0.5)
    table = {("llama.cpp", "gpu"): eff}
    on = predict(setup_on("GeForce RTX 4090 24GB"), Hardware(50.0, 8), 32768, table=table)
    off = predict(setup_on("GeForce RTX 4090 24GB", flash_attn=False), Hardware(50.0, 8), 32768, table=table)
    a_on, a_off = on.prefill.parts[0].attention_s, off.prefill.parts[0].attention_s
    assert math.isclose(a_off, 2 * a_on, rel_tol=1e-9)


def test_routed_experts_stream_at_their_own_bandwidth_share():
    base = replace(efficiency_for("llama.cpp", "gpu", "cuda", "consumer"), expert_bandwidth=1.0)
    slow = replace(base, expert_bandwidth=0.5)
    card = card_named("GeForce RTX 4090 24GB")

    def decode(model: str, eff):
        setup = Setup(load_model(model), configured("llama.cpp"), card, weights="q4_k_m")
        return predict(setup, Hardware(50.0, 8), 4096, table={("llama.cpp", "gpu"): eff}).decode.parts[0]

    one, half = decode("Qwen/Qwen3-30B-A3B", base), decode("Qwen/Qwen3-30B-A3B", slow)
    assert 0 < one.expert_bytes < one.weight_bytes and one.expert_bytes == half.expert_bytes
    rate = card.bandwidth_gb_s * 1e9 * base.bandwidth
    assert math.isclose(half.weights_s - one.weights_s, one.expert_bytes / rate, rel_tol=1e-9)  # 2× on their share
    dense_one, dense_half = decode(MODEL, base), decode(MODEL, slow)
    assert dense_one.expert_bytes == 0 and dense_one.weights_s == dense_half.weights_s


@pytest.mark.parametrize(
    ("field", "model", "layers"),
    [
        ("overhead_recurrent_s", "Qwen/Qwen3.5-9B", 24),  # config.json: 24 linear_attention (Gated DeltaNet) of 32
        ("overhead_recurrent_s", "Qwen/Qwen3-Next-80B-A3B-Instruct", 36),  # 48 layers, full attention every 4th
        ("overhead_recurrent_s", "Qwen/Qwen3-8B", 0),
        ("overhead_recurrent_s", "tiiuae/Falcon-H1-7B-Instruct", 0),  # Mamba 2: llama.cpp's fused ssm_conv/ssm_scan
        ("overhead_recurrent_s", "LiquidAI/LFM2-1.2B", 0),  # short conv: one ssm_conv
        ("overhead_moe_s", "Qwen/Qwen3-30B-A3B", 48),  # every layer routes to 8 of 128 experts
        ("overhead_moe_s", "openai/gpt-oss-20b", 24),
        ("overhead_moe_s", "deepseek-ai/DeepSeek-V2-Lite", 26),  # first_k_dense_replace 1: the first layer is dense
        ("overhead_moe_s", "ai21labs/Jamba-v0.1", 16),  # expert_layer_period 2
        ("overhead_moe_s", "Qwen/Qwen3-8B", 0),
    ],
)
def test_each_layer_of_a_kernel_chain_pays_its_overhead_once_per_pass(field, model, layers):
    """Gated DeltaNet layers (a chain of small state-update kernels) and MoE layers (router, top-k, the expert
    matmuls by id) each add their per-layer overhead to every pass, decode step and prompt chunk alike."""
    base = replace(efficiency_for("llama.cpp", "gpu", "cuda", "consumer"), overhead_recurrent_s=0.0, overhead_moe_s=0.0)
    extra = replace(base, **{field: 1e-3})
    setup = Setup(load_model(model), configured("llama.cpp"), card_named("H100 80GB SXM"), weights="q8_0")

    def speed(eff):
        return predict(setup, Hardware(50.0, 8), 8192, table={("llama.cpp", "gpu"): eff})

    without, with_ = speed(base), speed(extra)
    assert math.isclose(with_.decode.overhead_s - without.decode.overhead_s, layers * 1e-3, abs_tol=1e-12)
    passes = math.ceil(8192 / setup.engine.options.n_ubatch)
    assert math.isclose(with_.prefill.overhead_s - without.prefill.overhead_s, passes * layers * 1e-3, rel_tol=1e-9)


@pytest.mark.parametrize(
    ("engine", "gpus", "ngl", "hops"),
    [
        ("llama.cpp", 1, None, 0),
        ("llama.cpp", 4, None, 3),  # -sm layer: a pass goes GPU 0 -> 1 -> 2 -> 3
        ("llama.cpp", 8, None, 7),
        ("llama.cpp", 4, 3, 2),  # -ngl 3: 2 layers and the output, 3 slots; GPU 3 of 4 holds none (Offload.split)
        ("llama.cpp", 4, 0, 0),  # only the output layer on a GPU
        ("vllm", 4, None, 0),  # tensor parallel: timed by each GPU's share, in parallel
    ],
)
def test_a_pass_pays_a_hop_for_each_gpu_of_llamacpps_split_it_goes_on_to(engine, gpus, ngl, hops):
    """llama.cpp's layer split runs a pass through its GPUs one after another, each handing the hidden state to the
    next (overhead_hop_s per GPU past the first that holds a slot of the offload); vLLM's tensor parallel does not."""
    from core.fit import on_gpus

    base = replace(efficiency_for(engine, "gpu", "cuda", "consumer"), overhead_hop_s=0.0)
    extra = replace(base, overhead_hop_s=1e-3)
    setup = on_gpus(Setup(load_model("Qwen/Qwen3-8B"), configured(engine), card_named("RTX 3090"), gpu_layers=ngl,
                          weights="q4_k_m" if engine == "llama.cpp" else "bf16"), gpus)  # fmt: skip

    def speed(eff):
        return predict(setup, Hardware(50.0, 8), 4096, table={(engine, "gpu"): eff, (engine, "cpu"): eff})

    without, with_ = speed(base), speed(extra)
    assert with_.decode.hops == hops
    assert math.isclose(with_.decode.overhead_s - without.decode.overhead_s, hops * 1e-3, abs_tol=1e-12)
    passes = math.ceil(4096 / setup.engine.options.n_ubatch) if engine == "llama.cpp" else with_.prefill.passes
    assert math.isclose(with_.prefill.overhead_s - without.prefill.overhead_s, passes * hops * 1e-3, abs_tol=1e-12)


def test_the_hop_is_fitted_only_from_runs_on_one_card_beside_several():
    """The hop's cost shows only where a backend's runs on several cards sit beside runs on one, and is never pooled
    over backends."""
    from tests.bench.fit_corpus import Terms, fit_keys, loss

    def run(hops: int, measured: float) -> Terms:
        return Terms(0.01, 0.0, 0.0, 0.0, 1, False, True, "legacy", 1, measured, 1, 128, hops=hops)

    one, four = run(0, 100.0), run(3, 1 / (0.01 + 3e-3))
    assert "overhead_hop_s" in fit_keys([one, four])
    assert "overhead_hop_s" not in fit_keys([one, one]) and "overhead_hop_s" not in fit_keys([four, four])
    assert "overhead_hop_s" not in fit_keys([one, four], pooled=True)
    p = {"bandwidth": 1.0, "decode_compute": 1.0, "decode_attention": 1.0, "flash_off": 1.0, "expert_bandwidth": 1.0,
         "prefill_half_tokens": 1.0, "overhead_step_s": 0.0, "overhead_recurrent_s": 0.0, "overhead_moe_s": 0.0,
         "overhead_hop_s": 0.0}  # fmt: skip
    assert loss([one, four], p | {"overhead_hop_s": 1e-3}, None) < 1e-9 < loss([one, four], p, None)


def test_the_moe_overhead_is_fitted_beside_dense_runs_and_not_pulled_from_nothing():
    """The per-MoE-layer overhead is fitted only where a backend has MoE runs beside dense ones (never pooled over
    backends, as the experts' bandwidth share), and a parent that never fitted it (0) does not pin it: a log pull
    from its floor would cost more than any rows could repay."""
    from tests.bench.fit_corpus import Terms, fit_keys, loss

    def run(moe: int, measured: float) -> Terms:
        return Terms(0.01, 0.0, 0.0, 0.0, 1, False, True, "legacy", 1, measured, 1, 128, moe=moe)

    dense, moe = run(0, 100.0), run(48, 50.0)
    assert "overhead_moe_s" in fit_keys([dense, moe])
    assert "overhead_moe_s" not in fit_keys([dense, dense]) and "overhead_moe_s" not in fit_keys([moe, moe])
    assert "overhead_moe_s" not in fit_keys([dense, moe], pooled=True)
    p = {
        "bandwidth": 1.0, "decode_compute": 1.0, "decode_attention": 1.0, "flash_off": 1.0, "expert_bandwidth": 1.0,
        "prefill_half_tokens": 1.0, "overhead_step_s": 0.0, "overhead_recurrent_s": 0.0, "overhead_moe_s": 0.0,
    }  # fmt: skip
    fitted_ = p | {"overhead_moe_s": 1e-2 / 48}  # the MoE run's 10 ms more, spread over its layers
    assert loss([dense, moe], fitted_, None) < 1e-9 < loss([dense, moe], p, None)
    assert loss([dense, moe], fitted_, p) < loss([dense, moe], p, p)  # free from a parent at 0


def test_the_experts_fill_curve_is_fitted_only_from_moe_prompts_beside_dense_ones():
    """A routed expert's GEMM fills by its own curve (expert_half_tokens), fitted per backend only where its MoE
    prompts sit beside dense ones; at 0 it is the dense pass's curve, and the descent starts it there."""
    from tests.bench.fit_corpus import Terms, descend, fit_keys, loss

    def run(prefill: bool, moe: int, measured: float) -> Terms:
        experts = 0.5 if moe else 0.0  # half the matmul time is routed experts', 16 tokens to each
        return Terms(0.0, 1.0, 0.0, 0.0, 1, prefill, True, "legacy", 512, measured, 512, 512, experts=experts,
                     routed_tokens=16, moe=moe)  # fmt: skip

    dense, moe = run(True, 0, 200.0), run(True, 48, 100.0)
    assert "expert_half_tokens" in fit_keys([dense, moe])
    assert "expert_half_tokens" not in fit_keys([dense, moe], pooled=True)
    assert "expert_half_tokens" not in fit_keys([run(False, 0, 200.0), run(False, 48, 100.0)])  # decodes only
    p = {
        "bandwidth": 1.0, "prefill_compute": 1.0, "prefill_attention": 1.0, "flash_off": 1.0, "expert_bandwidth": 1.0,
        "prefill_half_tokens": 64.0, "overhead_step_s": 0.0, "overhead_recurrent_s": 0.0, "overhead_moe_s": 0.0,
        "expert_half_tokens": 0.0,
    }  # fmt: skip
    assert loss([dense, moe], p, None) == loss([dense, moe], p | {"expert_half_tokens": 64.0}, None)
    fitted_ = descend([dense, moe], p, ["expert_half_tokens"], p)
    assert fitted_["expert_half_tokens"] != 64.0 and loss([dense, moe], fitted_, p) < loss([dense, moe], p, p)


APPLE = "Apple M4 Max 48GB (16C CPU / 40C GPU)"


def test_a_prompt_pass_of_eight_tokens_or_fewer_is_neither_fitted_nor_checked():
    """llama.cpp multiplies a pass of up to 8 tokens with its mat-vec kernels (ggml-cuda MMVQ_MAX_BATCH_SIZE,
    ggml-metal ne11_mm_min), a batched decode's, not the prompt GEMMs kvscope's prefill times: ggerganov's Qwen3-Next
    sweep on an M2 Ultra (PR #19375, pp1 to pp2048) keeps only its long prompts, and a micro-batch of 8 is left out
    where 16 stands."""
    from tests.bench.fit_corpus import MATVEC_MAX_TOKENS, corpus_lines, to_row

    sweep = [r for r in corpus_lines() if r["source_id"] == "llamacpp-pr-19375-optimizing-qwen3next-graph"]
    kept = []
    for r in sweep:
        try:
            kept.append(to_row(r).raw["test"])
        except InputError as err:
            assert r["n_prompt"] and r["n_prompt"] <= MATVEC_MAX_TOKENS and "mat-vec" in str(err), r["test"]
    assert sorted(set(kept)) == ["pp2048", "pp512", "tg32"] and len(kept) == 9
    prompt = next(r for r in sweep if r["test"] == "pp512")
    assert to_row(prompt | {"n_ubatch": 16}).kind == "prefill"
    with pytest.raises(InputError, match="mat-vec"):
        to_row(prompt | {"n_ubatch": MATVEC_MAX_TOKENS})


@pytest.mark.parametrize(
    ("model", "card", "caveat"),
    [
        # Metal on Apple silicon: no held-out run of a MoE or a DeltaNet model, so their layers' kernels are unchecked
        ("Qwen/Qwen3-30B-A3B", APPLE, "no MoE model among them: its 48 MoE layers'"),
        ("Qwen/Qwen3.5-9B", APPLE, "no Gated DeltaNet model among them: its 24 DeltaNet layers'"),
        ("Qwen/Qwen3-8B", APPLE, ""),
        # the Strix Halo's ROCm runs held out include MoE and DeltaNet models: their error covers these layers
        ("Qwen/Qwen3-30B-A3B", "AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB", ""),
        ("Qwen/Qwen3.5-35B-A3B", "AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB", ""),
    ],
)
def test_an_error_bar_says_which_of_the_models_layers_its_held_out_runs_never_had(model, card, caveat):
    setup = Setup(load_model(model), configured("llama.cpp"), card_named(card), weights="q4_k_m")
    speed = predict(setup, Hardware(50.0, 8), 4096)
    for bar in (speed.decode_error, speed.prefill_error):
        assert bar.checked and (caveat in bar.caveat if caveat else "among them" not in bar.caveat), bar.caveat
        assert caveat in bar.label if caveat else "among them" not in bar.label


@pytest.mark.parametrize(("backend", "klass"), [("cuda", "consumer"), ("metal", "apple")])
def test_the_moe_overhead_brings_the_published_moe_decodes_closer(backend, klass):
    """The RTX 4090's gpt-oss-20b and Qwen3-30B-A3B decodes (llama.cpp PRs #16834, #16649) and the M2 Ultra's: the
    fitted per-MoE-layer overhead (tens of µs, a step's chain of router and expert kernels) lowers their median
    error. The Strix Halo's ROCm MoE decodes were a third case until the refit of 2026-12-07 (ROCm's micro-batch
    sweeps in), which put ROCm's overhead at its floor: they read within 6 % without it. Discussion #15396's
    gpt-oss-20b decodes on eight consumer cards (session 67, August 2025 builds) are left out here: on CUDA they
    read 0.82-1.1x with it and 0.91-1.22x without, so over every consumer MoE decode the overhead no longer lowers
    the median error (12.0 against 9.7 %); the RTX 4090's PR runs read 0.99-1.18x with it, 1.10-1.50x without."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s, terms

    eff = efficiency_for("llama.cpp", "gpu", backend, klass)
    assert 1e-5 < eff.overhead_moe_s < 3e-4
    rows = [r for r in load_rows()[0] if r.kind == "decode" and r.backend == backend and r.klass == klass]
    rows = [r for r in rows if terms(r).moe and r.raw["source_id"] != "llamacpp-disc-15396-gpt-oss-guide"]
    assert len(rows) >= 4

    def median_error(table) -> float:
        return statistics.median(abs(predicted_tok_s(r, table) / r.raw["tok_s"] - 1) for r in rows)

    key = ("llama.cpp", "gpu")
    assert median_error({key: eff}) < median_error({key: replace(eff, overhead_moe_s=0.0)})


def test_the_efficiencies_line_gives_the_fill_curves_the_prompt_used():
    from core.speed.report import speed_lines

    setup = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card_named("GeForce RTX 4090 24GB"),
                  weights="q4_k_m")  # fmt: skip
    eff = efficiency_for("llama.cpp", "gpu", "cuda", "consumer")
    for expert_half in (0.0, 20.0):
        table = {("llama.cpp", "gpu"): replace(eff, prefill_half_tokens=50.0, expert_half_tokens=expert_half)}
        (line,) = [x for x in speed_lines(predict(setup, Hardware(50.0, 8), 4096, table=table)) if "fill as" in x]
        curves = r"n ÷ \(n \+ ([\d.]+)\) for n tokens a pass(?:, a routed expert's as n ÷ \(c \+ ([\d.]+)\))?"
        m = re.search(curves, line)
        assert m and float(m[1]) == 50.0 and (float(m[2]) == expert_half if expert_half else m[2] is None), line
        # a 4,096-token prompt in 512-token passes: each expert's 32 tokens run as the pass's 128-column MMQ tile
        assert "32 tokens a pass run as 128 columns" in " ".join(speed_lines(predict(setup, Hardware(50.0, 8), 4096)))


def test_the_printed_overhead_formula_evaluates_to_the_overhead_used():
    from core.speed.report import speed_lines

    setup = Setup(load_model("Qwen/Qwen3.5-35B-A3B"), configured("llama.cpp"), card_named("GeForce RTX 4090 24GB"),
                  weights="q4_k_m")  # fmt: skip
    speed = predict(setup, Hardware(50.0, 8), 4096)
    lines = [line for line in speed_lines(speed) if line.startswith("- overhead:")]
    assert len(lines) == 2
    for line, timing in zip(lines, (speed.decode, speed.prefill), strict=True):
        m = re.match(
            r"- overhead: (\d+) pass(?:es)? × \(([\d.]+) s \+ 30 Gated DeltaNet layers × ([\d.]+) s"
            r"(?: \+ 40 MoE layers × ([\d.]+) s)?\) = ([\d.]+) s",
            line,
        )
        assert m, line
        passes, step, per_layer, total = int(m[1]), float(m[2]), float(m[3]), float(m[5])
        per_moe = float(m[4] or 0.0)
        assert passes == (1 if timing is speed.decode else 8)  # 4,096 tokens in 512-token passes
        assert math.isclose(passes * (step + 30 * per_layer + 40 * per_moe), total, rel_tol=1e-4)
        assert math.isclose(total, timing.overhead_s, abs_tol=1e-6)


def test_every_overhead_term_is_timed_and_shown_from_one_table():
    """A pass's counted overheads live in one table (OVERHEAD_TERMS): each Efficiency field `overhead_*_s` but the
    fixed one is in it, and with every term set, the overhead used, its printed formula and the entry's rates carry
    all of them, a term at 0 left out."""
    from dataclasses import fields

    from core.speed.efficiency import OVERHEAD_TERMS, Efficiency, overhead_rates
    from core.speed.predict import Timing
    from core.speed.report import overhead_text
    from tests.test_app_formulas import evaluate

    named = {f.name for f in fields(Efficiency) if f.name.startswith("overhead_") and f.name.endswith("_s")}
    assert named - {"overhead_step_s"} == {field for field, _, _ in OVERHEAD_TERMS}
    terms = {"overhead_recurrent_s": 2e-4, "overhead_moe_s": 3e-4, "overhead_hop_s": 4e-4, "overhead_seq_s": 5e-4}
    e = Efficiency("llama.cpp", "gpu", 1.0, 1.0, 1.0, 1.0, 1.0, 1e-3, 1e-4, "fitted", "by hand", **terms)
    # 10 layers, 3 of them Gated DeltaNet, 4 with experts; 2 GPUs past the first; 5 sequences
    per_pass = 1e-3 + 10 * 1e-4 + 3 * 2e-4 + 4 * 3e-4 + 2 * 4e-4 + 4 * 5e-4
    assert e.overhead_s(10, 3, 4, 2, 5) == pytest.approx(per_pass)
    t = Timing((), 2 * per_pass, passes=2, layers=10, chained=3, driver=e, moe=4, hops=2, sequences=5)
    text = overhead_text(t)
    for term in ("10 layers ×", "3 Gated DeltaNet layers ×", "4 MoE layers ×", "2 GPU hops ×", "4 sequences past the"):
        assert term in text, text
    assert evaluate(text.rsplit(" = ", 1)[0])[0] == pytest.approx(2 * per_pass)
    assert overhead_rates(vars(e)) == (
        "1 ms per pass + 0.1 ms per layer + 0.2 ms per Gated DeltaNet layer + 0.3 ms per MoE layer + 0.4 ms per GPU "
        "hop + 0.5 ms per sequence past the first"
    )
    assert "MoE" not in overhead_rates(vars(replace(e, overhead_moe_s=0.0)), "/")
    assert "1 MoE layer ×" in overhead_text(replace(t, moe=1))


def test_the_deltanet_overhead_brings_the_published_hybrid_decodes_within_their_error():
    """Qwen3.5-35B-A3B and Qwen3-Next-80B-A3B decode on the Strix Halo (kyuz0's runs in the corpus, fit and held-out
    alike): with the fitted per-layer overhead their median error is under 15 %; without it every one reads over
    15 % fast: the term is what the runs show, not noise the fit absorbed."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    rows = [
        r for r in load_rows()[0]
        if r.kind == "decode" and r.raw["model_id"] in ("Qwen/Qwen3.5-35B-A3B", "Qwen/Qwen3-Next-80B-A3B-Instruct")
        and "BF16" not in r.raw["weights"] and "Strix Halo" in r.raw["card"]
    ]  # fmt: skip
    assert len(rows) >= 12
    key = ("llama.cpp", "gpu")

    def ratios(zero: bool) -> list[float]:
        out = []
        for r in rows:
            eff = efficiency_for("llama.cpp", "gpu", r.backend, r.klass)
            table = {key: replace(eff, overhead_recurrent_s=0.0) if zero else eff}
            out.append(predicted_tok_s(r, table) / r.raw["tok_s"])
        return out

    fitted_errors = sorted(abs(x - 1) for x in ratios(zero=False))
    assert fitted_errors[len(fitted_errors) // 2] < 0.15
    assert efficiency_for("llama.cpp", "gpu", "rocm", "apu").overhead_recurrent_s > 1e-5
    assert min(ratios(zero=True)) > 1.15


def test_the_deltanet_overhead_fitted_on_apus_holds_on_a_published_cuda_run():
    """Outside the corpus and on another backend: llama.cpp PR #19365 (2026-02, before its own change) reports
    Qwen3-Next-80B-A3B-Instruct Q4_K_M decoding at 58.25 tok/s on an A100, 69.44 after it
    (https://github.com/ggml-org/llama.cpp/pull/19365). The 80B's 48 GB of Q4_K_M needs the 80 GB A100. kvscope reads
    the newer figure within 25 %; without the per-layer term it reads it over 2x fast."""
    setup = Setup(load_model("Qwen/Qwen3-Next-80B-A3B-Instruct"), configured("llama.cpp"), card_named("A100 80GB SXM"),
                  weights="q4_k_m")  # fmt: skip
    eff = efficiency_for("llama.cpp", "gpu", "cuda", "datacenter")

    def ratio(**zeroed: float) -> float:
        table = {("llama.cpp", "gpu"): replace(eff, **zeroed)}
        return predict(setup, Hardware(50.0, 8), 128, table=table).decode_tok_s / 69.44

    assert abs(ratio() - 1) < 0.25
    assert ratio(overhead_recurrent_s=0) > 2


def _corpus_row(source_id: str, card: str, kind: str, weights: str) -> dict:
    from tests.bench.fit_corpus import corpus_lines

    return next(
        r for r in corpus_lines()
        if (r["source_id"], r["card"], r["kind"], r["weights"]) == (source_id, card, kind, weights)
    )  # fmt: skip


@pytest.mark.parametrize(
    ("source_id", "card", "kind", "weights", "cublas"),
    [
        ("xiongjiedai-llama3", "A100 80GB PCIe", "prefill", "Q4_K - Medium", True),  # b2824: dequantised for cuBLAS
        ("xiongjiedai-llama3", "A100 80GB PCIe", "prefill", "F16", False),  # F16 still goes through cuBLAS
        ("xiongjiedai-llama3", "A100 80GB PCIe", "decode", "Q4_K - Medium", False),  # one token: MMVQ then and now
        ("llamacpp-pr-4766-backend-sched-jg", "GeForce RTX 3090 24GB", "prefill", "Q4_0", True),  # 2024-01
        ("llamacpp-pr-4766-backend-sched-jg", "Tesla P40 24GB", "prefill", "Q4_0", False),  # Pascal: no int8 MMA
        ("llamacpp-pr-7676-mmq-tensor-cores", "GeForce RTX 4090 24GB", "prefill", "Q4_0", False),  # MMQ forced
        ("llamacpp-disc-15013-cuda", "A100 80GB PCIe", "prefill", "Q4_0", False),  # a 2025 build: MMQ
    ],
)
def test_quantised_cuda_prompts_timed_through_cublas_before_mmq_became_the_default(source_id, card, kind, weights,
                                                                                   cublas):  # fmt: skip
    """PR #8075 (2024-06-24) made llama.cpp's int8 MMQ kernels the default for quantised prompts on NVIDIA cards from
    Turing on; before it such prompts were dequantised to FP16 for cuBLAS. Runs of that path leave the fit and the
    check; the rest of the same sources stay."""
    from tests.bench.fit_corpus import cublas_prefill, to_row

    r = _corpus_row(source_id, card, kind, weights)
    klass = card_class(card_named(card), "cuda")
    assert cublas_prefill(r, klass, format_family(r["weights"].split()[0])) is cublas
    if cublas:
        with pytest.raises(InputError, match="cuBLAS, not MMQ"):
            to_row(r)


@pytest.mark.parametrize(
    ("source_id", "card", "kind", "weights", "host"),
    [
        ("llamacpp-disc-15396-gpt-oss-guide", "GeForce RTX 4090 24GB", "prefill", "MXFP4 MoE", True),  # b6210
        ("llamacpp-disc-15396-gpt-oss-guide", "GeForce RTX 4080 SUPER 16GB", "prefill", "MXFP4 MoE", False),  # b6316
        ("llamacpp-disc-15396-gpt-oss-guide", "GeForce RTX 4090 24GB", "decode", "MXFP4 MoE", False),  # MMVQ
        ("llamacpp-disc-15396-gpt-oss-guide", "V100 16GB PCIe", "prefill", "MXFP4 MoE", False),  # Volta: cuBLAS loop
        ("augmxnt-llm-tracker-deepseek-v3-8xh100", "H100 80GB SXM5", "prefill", "Q5_K - Medium", True),  # b4418
        ("augmxnt-llm-tracker-h200-405b", "H200 141GB SXM", "prefill", "IQ2_XXS - 2.0625 bpw", False),  # dense, b5599
    ],
)
def test_cuda_moe_prompts_from_before_the_device_side_moe_helper_are_set_aside(source_id, card, kind, weights, host):
    """PR #15525 (opened 2025-08-23) moved ggml-cuda's MMQ routing helper for routed experts from the host to the
    device; a quantised MoE prompt from a build before b6211 (the first after b6210, which predates it) waited for the
    GPU once per MoE layer and pass, a path current builds no longer take. Such runs leave the fit and the check; a
    dense model's prompt of the same builds, a decode, a later build and Volta's cuBLAS loop stay."""
    from tests.bench.fit_corpus import CUDA_MOE_DEVICE_BUILD, build_number, host_moe_helper, kvscope_format, to_row

    r = _corpus_row(source_id, card, kind, weights)
    if host:
        assert (build_number(r["build"]) or 0) < CUDA_MOE_DEVICE_BUILD
        assert host_moe_helper(r, card_class(card_named(card), "cuda"), format_family(kvscope_format(r["weights"])))
        with pytest.raises(InputError, match="host-side MoE helper"):
            to_row(r)
    else:
        assert to_row(r).raw is r


def test_no_fitted_bandwidth_share_passes_the_cards_own_bandwidth():
    """A share of a card's bandwidth is at most all of it (fit_corpus.CEILINGS): the loss refuses a step past the
    ceiling, and every fitted GPU group's bandwidth and routed-expert bandwidth shares are at most 1 (before the
    ceiling the CUDA consumer class's came to 1.12, its per-step overhead pinned by the levels above)."""
    from tests.bench.fit_corpus import CEILINGS, Terms, loss

    row = Terms(1e-3, 1e-4, 0.0, 0.0, 1, False, True, "float", 1, 500.0, 1, 128)
    p = {k: 1.0 for k in ("decode_compute", "prefill_compute", "decode_attention", "prefill_attention", "flash_off")}
    p |= {"prefill_half_tokens": 40.0, "expert_bandwidth": 1.0, "overhead_step_s": 1e-3, "overhead_recurrent_s": 0.0,
          "overhead_moe_s": 0.0, "dequant_bandwidth": 1.0}  # fmt: skip
    assert math.isfinite(loss([row], p | {"bandwidth": 1.0}, None))
    assert loss([row], p | {"bandwidth": 1.01}, None) == math.inf
    assert set(CEILINGS) == {"bandwidth", "expert_bandwidth"}
    groups = [g for g in fitted()["groups"] if g.get("device") == "gpu" and g.get("engine") == "llama.cpp"]
    assert groups and all(g["bandwidth"] <= 1.0 and g["expert_bandwidth"] <= 1.0 for g in groups)


@pytest.mark.parametrize(
    ("card", "backend", "share"),
    [
        ("AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB", "vulkan", 0.25),
        ("Radeon RX 7900 XTX 24GB", "vulkan", 0.25),
        ("AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB", "rocm", 1.0),  # hipBLAS takes BF16 on WMMA
        ("GeForce RTX 4090 24GB", "vulkan", 1.0),  # coopmat2 has BF16
        ("GeForce RTX 4090 24GB", "cuda", 1.0),
    ],
)
def test_bf16_weights_on_vulkan_rdna3_multiply_at_the_fp32_shader_rate(card, backend, share):
    def prefill(weights: str):
        setup = Setup(load_model(MODEL), configured("llama.cpp"), card_named(card), weights=weights)
        return predict(setup, Hardware(50.0, 8, backend=backend), 4096).prefill.parts[0]

    bf16, f16 = prefill("gguf_bf16"), prefill("gguf_f16")
    assert bf16.weight_bytes == f16.weight_bytes and bf16.attention_s == f16.attention_s  # only the matmuls differ
    assert math.isclose(bf16.peak_gflops, f16.peak_gflops * share, rel_tol=1e-12)
    assert math.isclose(bf16.matmul_s, f16.matmul_s / share, rel_tol=1e-9)


def test_the_formula_says_why_a_matmul_peak_is_below_the_cards():
    from core.speed.report import part_lines

    def line(weights: str) -> str:
        card = card_named("Radeon RX 7900 XTX 24GB")
        setup = Setup(load_model(MODEL), configured("llama.cpp"), card, weights=weights)
        timing = predict(setup, Hardware(50.0, 8, backend="vulkan"), 4096).prefill
        return part_lines(timing, prefill=True)[0]

    assert "the matmuls' peak is 0.25× the card's listed one: llama.cpp's Vulkan backend multiplies BF16" in line(
        "gguf_bf16"
    )
    assert "matmuls' peak is" not in line("gguf_f16")


@pytest.mark.parametrize(
    ("backend", "weights", "scale"),
    [
        ("cuda", "q4_0", 4.0),
        ("cuda", "q4_k_m", 4.0),
        ("cuda", "gguf_f16", 1.0),
        ("vulkan", "q4_0", 4.0),
        ("vulkan", "q4_k_m", 1.0),
    ],
)
def test_a_pascal_card_is_timed_by_its_fp32_peak_and_dp4a_for_quantised_weights(backend, weights, scale):
    """Pascal GP10x has no tensor cores and runs FP16 at 1/64 rate: ggml-cuda multiplies quantised weights with dp4a
    (4 int8 multiply-adds per FP32 lane and clock) and F16 ones in FP32; ggml-vulkan's integer-dot shaders take the
    legacy quants only."""
    card = card_named("Tesla P40 24GB")
    assert card.fp32_only and card.dense_tflops == card.fp32_tflops == 11.76
    setup = Setup(load_model(MODEL), configured("llama.cpp"), card, weights=weights)
    timing = predict(setup, Hardware(50.0, 8, backend=backend), 4096).prefill
    part = timing.parts[0]
    assert part.attention_peak_gflops == 11.76e3 and math.isclose(part.peak_gflops, 11.76e3 * scale, rel_tol=1e-12)
    from core.speed.report import part_lines

    said = {
        "cuda": "the matmuls' peak is 4× the card's listed one: llama.cpp's CUDA backend multiplies quantised weights",
        "vulkan": "the matmuls' peak is 4× the card's listed one: llama.cpp's Vulkan backend multiplies legacy quants",
    }[backend]
    assert (said in part_lines(timing, prefill=True)[0]) == (scale == 4.0)


@pytest.mark.parametrize(
    ("card", "weights", "scale"),
    [
        ("Intel Arc A750 8GB", "q4_0", 14.7 * 4 / 117.6),  # the XMX peak is listed: its vector int8 rate is half
        ("Radeon RX 6700 XT 12GB", "q8_0", 13.21 * 4 / 26.43),  # the packed FP16 peak is listed: int8 is twice it
        ("V100 16GB PCIe", "q4_0", 14 * 4 / 112),  # tensor cores Vulkan does not use
        # k-quants and floats: the FP16 shaders, packed FP16 on the vector ALUs, not the XMX peak gpus.csv lists
        ("Intel Arc A750 8GB", "q4_k_m", 14.7 * 2 / 117.6),
        ("Intel Arc A750 8GB", "gguf_f16", 14.7 * 2 / 117.6),
        ("Radeon RX 6700 XT 12GB", "q4_k_m", 1.0),  # its listed peak is the packed FP16 one already
        ("Radeon RX 7900 XTX 24GB", "q4_0", 1.0),  # cooperative matrices: the listed matrix peak
        ("GeForce RTX 4090 24GB", "q4_0", 1.0),  # coopmat2
    ],
)
def test_legacy_quants_on_vulkan_without_matrix_cores_are_timed_by_int8_dot_products(card, weights, scale):
    """ggml-vulkan runs Q4_0…Q8_0 prompt matmuls as integer-dot MMQ (llama.cpp PR #12135) on the vector ALUs of
    cards it gives no cooperative-matrix path: four int8 multiply-adds per FP32 lane and clock, whatever kind of
    peak gpus.csv lists for the card."""
    c = card_named(card)
    setup = Setup(load_model(MODEL), configured("llama.cpp"), c, weights=weights)
    part = predict(setup, Hardware(50.0, 8, backend="vulkan"), 4096).prefill.parts[0]
    listed = c.dense_tflops * 1e3
    assert part.attention_peak_gflops == listed  # attention stays on the listed peak
    assert math.isclose(part.peak_gflops, listed * scale, rel_tol=1e-12)


def test_the_hopper_mma_sync_share_is_the_microbenchmarks_whole_kernel_rate():
    """The share is the H100 SXM microbenchmark's whole-kernel mma.sync rates (Johnsonms/NVIDIA-Hopper-Benchmark,
    reproduction/H100-dapperdingo/raw/mma_m16n8k16.log and mma_m16n8k32.log @ 374a9f16) against the listed dense
    peaks gpus.csv gives the H100 SXM5; wgmma on the same card (wgmma_fp16.log, wgmma_s8.log) came within 2 % of
    those peaks, so the listed peak is wgmma's."""
    h100 = card_named("H100 80GB SXM5")
    fp16 = 668.332 / h100.dense_tflops  # m16n8k16, FP16 in, FP32 accumulate: ggml-cuda's flash attention
    int8 = 1328.95 / h100.fp8_tflops  # m16n8k32 s8: MMQ's legacy quants, Q4_K, Q5_K (the INT8 peak is FP8's)
    assert HOPPER_MMA_SYNC_SHARE == pytest.approx(fp16, abs=0.01) == pytest.approx(int8, abs=0.01)
    assert 976.6 / h100.dense_tflops == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize(
    ("card", "backend", "weights", "matmul", "flash_prefill"),
    [
        ("H200 141GB SXM", "cuda", "q4_0", HOPPER_MMA_SYNC_SHARE, 1 / 8),  # MMQ; flash attention at GA102's rate
        ("H100 80GB PCIe", "cuda", "q4_k_m", HOPPER_MMA_SYNC_SHARE, 1 / 8),
        ("H200 141GB SXM", "cuda", "gguf_f16", 1.0, 1 / 8),  # F16 prompt matmuls: cuBLAS, wgmma
        ("A100 80GB SXM4", "cuda", "q4_0", 1.0, 1 / 4),  # Ampere: mma.sync is its full rate
        ("A30 24GB", "cuda", "q4_0", 1.0, 1 / 4),
        ("A40 48GB", "cuda", "q4_0", 1.0, 1.0),  # GA102, listed at its own rate per SM and clock
        ("GeForce RTX 4090 24GB", "cuda", "q4_0", 1.0, 1.0),
        ("H200 141GB SXM", "vulkan", "q4_0", 1.0, 1.0),  # another backend's kernels
    ],
)
def test_llamacpp_cuda_kernels_on_datacenter_dies_run_below_listed(card, backend, weights, matmul, flash_prefill):
    """On sm_90, ggml-cuda's int8 MMQ issues mma.sync, never wgmma: its peak is HOPPER_MMA_SYNC_SHARE of the listed
    one. Its flash-attention prompt kernel runs at GA102's tensor rate per SM and clock on GA100 and GH100 too
    (GA102_FA_SHARE). Decode's flash attention (fattn-vec: no matrix instructions) and attention without -fa
    (cuBLAS) keep the listed peak."""
    from core.speed.report import part_lines

    c = card_named(card)
    listed = c.dense_tflops * 1e3

    def timing(flash: bool, prefill: bool):
        setup = Setup(load_model(MODEL), configured("llama.cpp", flash_attn=flash), c, weights=weights)
        speed = predict(setup, Hardware(50.0, 8, backend=backend), 8192)
        return speed.prefill if prefill else speed.decode

    def attention_share(p) -> float:  # the attention rate used, as a share of the listed peak
        return p.attention_gflops / p.attention_peak_gflops

    prompt = timing(True, True)
    on, off, dec = prompt.parts[0], timing(False, True).parts[0], timing(True, False).parts[0]
    assert on.attention_peak_gflops == listed and math.isclose(on.peak_gflops, listed * matmul, rel_tol=1e-12)
    eff = on.efficiency
    assert math.isclose(attention_share(on), eff.prefill_attention * flash_prefill, rel_tol=1e-9)
    assert math.isclose(attention_share(off), eff.prefill_attention * eff.flash_off, rel_tol=1e-9)
    assert math.isclose(attention_share(dec), eff.decode_attention, rel_tol=1e-9)
    assert not off.attention_note and not dec.attention_note
    line = part_lines(prompt, prefill=True)[0]
    assert ("no more per SM and clock" in line) == (flash_prefill != 1.0)
    assert (f"the matmuls' peak is {HOPPER_MMA_SYNC_SHARE:.2g}× the card's listed one" in line) == (matmul != 1.0)


def test_the_flash_attention_shares_are_the_whitepapers_tensor_rates_per_sm_and_clock():
    """GA102_FA_SHARE against the listed peaks gpus.csv gives and the SM counts and boost clocks of NVIDIA's
    whitepapers (GA102 v2: RTX 3090, 82 SMs at 1,695 MHz; A100: 108 SMs at 1,410 MHz; H100: SXM5, 132 SMs at
    1,830 MHz): dense FP16 FLOP with FP32 accumulate per SM and clock, 512, 2,048 and 4,096."""
    per_sm_clock = {
        name: card_named(name).dense_tflops * 1e12 / (sms * mhz * 1e6)
        for name, sms, mhz in (("GeForce RTX 3090 24GB", 82, 1695), ("A100 80GB SXM4", 108, 1410),
                               ("H100 80GB SXM5", 132, 1830))
    }  # fmt: skip
    ga102 = per_sm_clock["GeForce RTX 3090 24GB"]
    assert ga102 == pytest.approx(512, rel=0.01)
    assert GA102_FA_SHARE["GA100"] == pytest.approx(ga102 / per_sm_clock["A100 80GB SXM4"], rel=0.01)
    assert GA102_FA_SHARE["GH100"] == pytest.approx(ga102 / per_sm_clock["H100 80GB SXM5"], rel=0.01)


def test_the_h200s_attention_at_depth_is_timed_near_what_it_measured():
    """This project's H200 runs (held out): pp512 from an empty cache and at depth 4,096, F16 and Q4_0 weights, flash
    attention on. What the depth added per token is the attention's time alone; the listed-peak share the fit takes
    from GeForce cards made it 6-8x faster than measured, GA102's rate per SM and clock within 1.5x."""
    from tests.bench.device_llamacpp import SOURCE_ID_PREFIX as DEVICE_SOURCE
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    predict_module = sys.modules["core.speed.predict"]
    rows = {
        (r.raw["weights"], r.raw["depth"] or 0): r for r in load_rows()[0]
        if r.raw["card"] == "H200 141GB SXM" and r.kind == "prefill" and r.raw["n_prompt"] == 512
        and r.raw["flash_attn"] and r.raw["source_id"].startswith(DEVICE_SOURCE)
    }  # fmt: skip
    assert len(rows) == 4 and all(r.held_out for r in rows.values())

    def added(weights: str, rate) -> float:  # seconds a token the depth added
        return 1 / rate(rows[(weights, 4096)]) - 1 / rate(rows[(weights, 0)])

    measured = {w: added(w, lambda r: r.raw["tok_s"]) for w in ("F16", "Q4_0")}
    assert all(40e-6 < m < 45e-6 for m in measured.values())
    shared = {w: added(w, predicted_tok_s) for w in measured}
    assert all(1 < measured[w] / shared[w] < 1.5 for w in measured), (measured, shared)
    listed = predict_module.flash_attention_peak
    try:
        predict_module.flash_attention_peak = lambda *a: MatmulPeak(HOPPER_MMA_SYNC_SHARE, "")
        before = {w: added(w, predicted_tok_s) for w in measured}
    finally:
        predict_module.flash_attention_peak = listed
    assert all(measured[w] / before[w] > 4 for w in measured), (measured, before)


def test_int8_dot_products_reach_the_share_the_fp16_shaders_did_on_an_rdna2_card():
    """The 4-per-FP32-lane rate checked against the engine: PR #12135's own llama-bench runs on an RX 6800 XT (8B
    Q4_0, pp512; comment of 2025-03-30): 921.40 tok/s with the FP16 shaders, 1,845.63 with integer dot products.
    Each is the same share of its peak, the listed packed-FP16 one and four times the listed FP32 one."""
    card = card_named("Radeon RX 6800 XT 16GB")
    flop = 2 * 8.03e9  # per token, llama-bench's 8.03 B parameters
    fp16_share = flop * 921.40 / (card.dense_tflops * 1e12)
    peak = matmul_peak(card, "vulkan", "q4_0")
    int8_share = flop * 1845.63 / (card.dense_tflops * peak.scale * 1e12)
    assert peak.scale == pytest.approx(2.0, rel=0.01) and "integer dot products" in peak.why
    assert int8_share == pytest.approx(fp16_share, rel=0.05)


def test_the_published_vulkan_cards_without_matrix_cores_agree_on_one_int8_share():
    """The corpus' legacy-quant prompts on Vulkan cards without a cooperative-matrix path but with int8 dot products
    (three vendors: Intel Arc A, RDNA2, Pascal): against the peak each card lists they read 0.46-2.7x, a 6x spread the
    one efficiency of a class cannot fit; against the int8 dot-product rate they lie within 2x of each other (1.5x
    when this was written)."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    rows = [r for r in load_rows()[0] if r.klass in ("no-coopmat", "no-coopmat-intel") and r.kind == "prefill"]
    dp4a = [r for r in rows if "integer dot" in matmul_peak(r.setup.card, "vulkan", r.setup.weights).why]
    assert len({r.raw["card"] for r in dp4a}) >= 5 and {r.raw["weights"] for r in dp4a} >= {"Q4_0", "Q4_1", "Q5_0"}
    ratios = [predicted_tok_s(r) / r.raw["tok_s"] for r in dp4a]
    assert max(ratios) / min(ratios) < 2


def test_a_vulkan_legacy_prompt_from_before_the_dp4a_shaders_is_left_out():
    """An A770's pp512 of Llama 2 7B Q4_0 at b3999 (October 2024: 158 t/s, its device line without 'int dot') ran the
    FP16 shaders; the scoreboard's Arc A750 and A770M, on builds with the DP4A MMQ shaders, ran it at 1,076 and 876.
    The old run stays out of the fit and the check; its decode, which never took that path, stays in."""
    from tests.bench.fit_corpus import VULKAN_DP4A_BUILD, before_vulkan_dp4a, load_rows, to_row

    old = _corpus_row("reddit-localllama-1ghvwsj-a770", "Intel Arc A770 16GB", "prefill", "Q4_0")
    assert old["tok_s"] < 200 and before_vulkan_dp4a(old, card_named(old["card"]), "q4_0")
    with pytest.raises(InputError, match=f"before b{VULKAN_DP4A_BUILD}"):
        to_row(old)
    assert to_row(_corpus_row("reddit-localllama-1ghvwsj-a770", "Intel Arc A770 16GB", "decode", "Q4_0"))
    arc = [
        r
        for r in load_rows()[0]
        if r.kind == "prefill" and r.raw["card"] in ("Intel Arc A750 8GB", "Intel Arc A770M 16GB")
    ]
    assert len(arc) == 2 and all(r.raw["tok_s"] > 800 for r in arc)
    # K-quants never took the DP4A path: an old run of them is not left out by this rule
    assert not before_vulkan_dp4a(old | {"weights": "Q4_K - Medium"}, card_named(old["card"]), "q4_k_m")


def test_a_vulkan_prompt_over_two_gpus_from_before_vulkans_events_is_timed_unpipelined(monkeypatch):
    """llama.cpp pipelines a prompt's passes over several GPUs only where every GPU backend reports async compute and
    events; ggml-vulkan reported neither before PR #18047 (fit_corpus.VULKAN_EVENTS_BUILD). kyuz0's two R9700s at
    b7423 agree: timed unpipelined, as the check now times them, each model's pp2048 at depth reads within a third of
    its own single-pass pp512 (which no pipeline touches); timed pipelined, 1.2-2.1x further off. CUDA's prompts over
    several GPUs, and Vulkan's from later builds, stay pipelined."""
    from tests.bench import fit_corpus

    runs = [
        r for r in fit_corpus.load_rows()[0]
        if r.raw["source_id"] == "kyuz0-amd-r9700-ai-toolboxes-vulkan-radv" and r.kind == "prefill"
    ]  # fmt: skip
    assert len(runs) == 15 and all(r.raw["n_devices"] == 2 and r.held_out for r in runs)

    def ratios() -> dict[tuple, float]:
        return {
            (r.raw["model"], r.raw["n_prompt"], r.raw["depth"]): fit_corpus.predicted_tok_s(r) / r.raw["tok_s"]
            for r in runs
        }

    for r in runs:
        timing, _ = fit_corpus._timing(r, None)
        assert fit_corpus.unpipelined(r.raw) and timing.pipelined_s == 0.0 and timing.pipeline is None
        assert fit_corpus.path_of(r) != "split-prompt"
    unpiped = ratios()
    monkeypatch.setattr(fit_corpus, "unpipelined", lambda r: False)
    piped = ratios()
    deep = [key for key in unpiped if key[1] == 2048]  # four 512-token passes each, which a pipeline overlaps
    assert len(deep) == 10
    for key in deep:
        single = unpiped[(key[0], 512, 0)]
        assert 0.65 < unpiped[key] / single < 1.25, key
        assert 1.2 < piped[key] / unpiped[key] < 2.1, key
    assert all(piped[key] == unpiped[key] for key in unpiped if key[1] == 512)  # one pass: nothing to overlap
    monkeypatch.undo()
    later = runs[0].raw | {"build": f"b{fit_corpus.VULKAN_EVENTS_BUILD} (0000000)"}
    assert not fit_corpus.unpipelined(later) and not fit_corpus.unpipelined(runs[0].raw | {"backend": "cuda"})
    assert not fit_corpus.unpipelined(runs[0].raw | {"n_devices": 1})


def test_vulkan_without_matrix_cores_multiplies_on_the_vector_alus():
    """Without a cooperative-matrix path, llama.cpp's Vulkan shaders cannot reach a matrix engine: Intel Arc A's
    K-quant and float matmuls run at packed FP16 on its vector ALUs (2 × 17.2 of the A770's 137.6 XMX TFLOPS), and a
    card without int8 dot products (RDNA1's RX 5700 XT: "int dot: 0") runs legacy quants there too, not as DP4A."""
    a770, navi10 = card_named("Intel Arc A770 16GB"), card_named("Radeon RX 5700 XT 8GB")
    assert matmul_peak(a770, "vulkan", "q4_0").scale == 4 * 17.2 / 137.6  # int8 dot products on Xe-HPG
    for fmt in ("q4_k_m", "gguf_f16", "iq4_xs"):
        assert math.isclose(matmul_peak(a770, "vulkan", fmt).scale, 2 * 17.2 / 137.6)
    assert matmul_peak(navi10, "vulkan", "q4_0").scale == 1.0  # its listed FP16 peak is already 2 × FP32
    assert matmul_peak(a770, "sycl", "q4_k_m").scale == 1.0  # one token: SYCL's mat-vec kernels, bandwidth-bound
    assert card_class(card_named("GeForce GTX 1660 6GB"), "vulkan") == "no-coopmat"  # no tensor cores at all


def test_vllm_on_a_pascal_card_is_refused_with_the_reason():
    setup = Setup(load_model(MODEL), configured("vllm"), card_named("GeForce GTX 1080 Ti 11GB"), weights="bf16")
    with pytest.raises(InputError, match=r"GTX 1080 Ti 11GB has no FP16 or BF16 matrix units.*compute capability 7\.0"):
        predict(setup, Hardware(50.0, 8), 4096)
    assert "choose llama.cpp" in untimed(setup) and untimed(replace(setup, engine=configured("llama.cpp"))) is None
    assert "1/64 of the FP32 rate" in untimed(replace(setup, engine=configured("transformers")))
    # a peak given by hand is the card's 16-bit one: any engine is timed by it
    given = Setup(load_model(MODEL), configured("vllm"), with_figures(setup.card, None, 20.0), weights="bf16")
    assert predict(given, Hardware(50.0, 8), 4096).prefill.parts[0].peak_gflops == 20e3


def test_the_published_pascal_runs_a_fit_never_saw_are_within_a_fifth():
    """The corpus' held-out Pascal runs: the scoreboard's GTX 1080 Ti and TITAN Xp (llama-bench pp512 and tg128, Q4_0)
    within a fifth; before the FP32 peak and the dp4a rule kvscope refused to time these cards at all. PR #24127's
    P40 prompts by micro-batch (build 6838c6437, 2026) run faster than the class's fit, which holds PR #7716's P40
    prompts from a June 2024 branch before stream-k MMQ (PR #8018): within 35 % (0.70 at micro-batch 16 of Q4_K_S),
    their median within a fifth. Every other held-out Pascal run (a GTX 1060 in a virtual machine, 2026) within 35 %."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    rows = [r for r in load_rows()[0] if r.klass == "pascal" and r.held_out]
    scoreboard = [r for r in rows if r.raw["source_id"] == "llamacpp-disc-15013-cuda"]
    assert {r.raw["card"] for r in scoreboard} == {"GeForce GTX 1080 Ti 11GB", "TITAN Xp 12GB"} and len(scoreboard) == 8
    assert all(0.8 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.2 for r in scoreboard)
    p40 = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows if r.raw["card"] == "Tesla P40 24GB"]
    assert len(p40) == 16
    assert all(0.65 <= x <= 1.35 for x in p40) and 0.8 <= statistics.median(p40) <= 1.2
    others = [r for r in rows if r not in scoreboard and r.raw["card"] != "Tesla P40 24GB"]
    assert others and all(0.65 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.35 for r in others)


def test_the_dgx_spark_is_a_unified_memory_cuda_card_whose_published_runs_check_blind():
    """llama.cpp's own DGX Spark tables (benches/dgx-spark), in two versions of the file run on the same machine:
    b6918 (2025-11) and b7941 (2026-02), 5 models at 5 depths each. The Spark is CUDA on unified memory, a class no
    fit row has, so it is timed by the pooled CUDA constants; its runs are held out. The older build's runs are
    superseded, as the Strix Halo's are (APU_CURRENT_BUILD): the newer ran gpt-oss-20b's pp2048 19 % faster and Gemma 3
    4B's at depth 32,768 37 % faster. Decode, bound by the 273 GB/s the vendor lists, checks within about a fifth on
    every run (0.93-1.20x since the corpus of 2026-12-07, session 63, moved the pooled constants; the deepest Q8_0
    run of Qwen2.5 7B is the 1.20); the prompts' group error stays under the 35 % issue 19 allows any group (it was
    42 % on b6918's)."""
    from tests.bench.fit_corpus import APU_CURRENT_BUILD, build_number, corpus_lines, load_rows, predicted_tok_s

    spark = card_named("gb10")  # not an Apple "10C GPU" row
    assert spark.name == "DGX Spark (GB10) 128GB" and spark.unified_memory and spark.bandwidth_gb_s == 273
    assert card_class(spark, default_backend(spark)) == "apu" and default_backend(spark) == "cuda"
    published = [r for r in corpus_lines() if r["card"] == spark.name]
    builds = {build_number(r["build"]) for r in published}
    assert min(builds) < APU_CURRENT_BUILD <= max(builds)  # both versions are in the corpus
    rows = [r for r in load_rows()[0] if r.raw["card"] == spark.name]
    assert len(rows) == 50 and all(r.held_out and r.group == ("llama.cpp", "cuda", "apu") for r in rows)
    assert {build_number(r.raw["build"]) for r in rows} == {max(builds)}
    assert ("llama.cpp", "cuda", "apu") not in fitted_groups()  # nothing fitted on the class: the pooled constants
    decode = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows if r.kind == "decode"]
    assert len(decode) == 25 and all(0.8 <= x <= 1.21 for x in decode)
    spark = ("cuda", "apu", None)  # the group's own entries, not its kernel paths'
    bars = {e["kind"]: e for e in fitted()["errors"] if (e["backend"], e["card_class"], e.get("path")) == spark}
    assert bars["decode"]["rows"] == bars["prefill"]["rows"] == 25 and bars["prefill"]["median"] <= 0.35


def test_pr_22298s_micro_batch_sweeps_land_whole_and_give_volta_a_fit_of_its_own():
    """llama.cpp PR #22298's first table: llama 8B, pp2048 at micro-batches of 16 to 2,048 on five cards (build
    1b2cf9551), the rows of the passages the search index shows. Landed whole as rows of the PR's source, so each card
    is its own held-out unit: the RTX 4090's are held out, the others fitted. Volta, with two TITAN V runs before, now
    has a class of its own, and the V100's prompts at llama.cpp's default micro-batch (512) come within a fifth (IQ3_XXS
    within a quarter, 1.25x, since a V100's gpt-oss-20b runs joined the class in session 67 and took its bandwidth share
    from 0.90 to 0.44), where the pooled CUDA constants read them 1.7-2.6x fast. The P40's sweeps, which read 0.64-1.34x
    along the micro-batch, fit within a sixth at every size (within a tenth before the Pascal class also fitted PR
    #7716's P40 sweeps, from a June 2024 branch before stream-k MMQ, PR #8018, which ran slower)."""
    from tests.bench.fit_corpus import corpus_lines, load_rows, predicted_tok_s

    slug = "llamacpp-pr-22298-mmq-stream-k"
    published = [r for r in corpus_lines() if r["source_id"] == slug and r["build"] == "1b2cf9551"]
    assert len(published) == 108 and {r["model_id"] for r in published} == {"meta-llama/Llama-3.1-8B-Instruct"}
    rows = [r for r in load_rows()[0] if r.raw["source_id"] == slug and r.raw["build"] == "1b2cf9551"]
    assert len(rows) == len(published)  # every run is one kvscope takes
    assert {r.raw["card"] for r in rows if r.held_out} == {"GeForce RTX 4090 24GB"}
    assert ("llama.cpp", "cuda", "volta") in fitted_groups()
    v100 = [r for r in rows if r.raw["card"] == "V100 32GB PCIe" and r.raw["n_ubatch"] == 512]
    assert len(v100) == 3 and all(0.8 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.25 for r in v100)
    not_iq3 = [r for r in v100 if not r.raw["weights"].startswith("IQ3_XXS")]
    assert all(0.8 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.2 for r in not_iq3)
    p40 = [r for r in rows if r.raw["card"] == "Tesla P40 24GB"]
    assert len(p40) == 18 and all(0.83 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.17 for r in p40)


def test_cudas_mat_vec_kernels_add_their_fp32_work_to_their_read():
    """ggml-cuda's mat-vec kernels (passes of up to 8 tokens) run on the CUDA cores, and their work adds to the
    weights' read (groups.CUDA_MATVEC_WHY). The CUDA scoreboard's Llama 2 7B Q4_0 decodes on one card (discussion
    #15013: 58 runs on 29 cards, Turing to Blackwell), fitted by least squares on their own: the read plus a fixed time
    leaves a median |log error| of 0.11 and 8 runs outside 20 %, the A100 and A30 decoding as slowly as GeForce cards
    with half their bandwidth; adding the FLOPs over each card's FP32 peak (gpus.csv, TechPowerUp's) takes it to 0.05,
    every run within 20 % but an RTX 2070 SUPER's two (1.23x). The fit of the corpus agrees: with the rule, the
    datacenter class needs no bandwidth share of its own below the others'."""
    import numpy as np

    from core.speed.groups import CUDA_MATVEC_WHY, matmul_peak
    from tests.bench.fit_corpus import load_rows, predicted_tok_s, terms

    a100 = card_named("A100 80GB PCIe")
    peak = matmul_peak(a100, "cuda", "q4_0", 8)
    assert peak.matvec and peak.why == CUDA_MATVEC_WHY and peak.scale == pytest.approx(19.49 / a100.dense_tflops)
    assert not matmul_peak(a100, "cuda", "q4_0", 9).matvec and not matmul_peak(a100, "vulkan", "q4_0", 1).matvec
    # a card given by its figures has no FP32 peak: half the given one, as on GeForce cards, and the note says so
    given = matmul_peak(with_figures(a100, None, 100.0), "cuda", "q4_0", 1)
    assert given.matvec and given.scale == 0.5 and "FP32 peak is not known" in given.why
    speed = predict(setup_on("A100 80GB PCIe"), Hardware(50.0, 8), 4096)
    part, prompt = speed.decode.parts[0], speed.prefill.parts[0]
    assert part.matvec and part.rooflines_s == pytest.approx(part.weights_s + part.matmul_s)
    assert part.waits["memory"] >= part.weights_s and part.waits["compute"] >= part.matmul_s * (1 - 1e-9)
    assert not prompt.matvec and prompt.rooflines_s == pytest.approx(max(prompt.dense_sides))

    runs = [
        r for r in load_rows()[0]
        if r.raw["source_id"] == "llamacpp-disc-15013-cuda" and r.kind == "decode"
        and r.klass not in ("pascal",) and r.setup.card.fp32_tflops  # Pascal: no CUDA graphs, its own class
    ]  # fmt: skip
    cards = {r.raw["card"] for r in runs}
    assert len(cards) >= 20 and {"A100 80GB PCIe", "A30 24GB", "GeForce RTX 5090 32GB"} <= cards
    step = np.array([1 / r.raw["tok_s"] for r in runs])
    read = np.array([(t := terms(r)).weights + t.cache for r in runs])
    fp32 = np.array([r.setup.card.fp32_tflops for r in runs])

    def fitted_error(columns: list) -> tuple[float, set[str]]:
        x = np.column_stack(columns)
        ratio = x @ np.linalg.lstsq(x, step, rcond=None)[0] / step
        outside = {r.raw["card"] for r, q in zip(runs, ratio, strict=True) if abs(q - 1) > 0.2}
        return float(np.median(np.abs(np.log(ratio)))), outside

    without, missed = fitted_error([read, np.ones_like(read)])
    with_fp32, outside = fitted_error([read, np.ones_like(read), 1 / fp32])
    assert without > 0.1 and {"A100 80GB PCIe", "A30 24GB"} <= missed, (without, missed)
    assert with_fp32 < 0.6 * without and len(outside) <= 1 and not outside & missed, (with_fp32, outside)
    shares = {
        g["card_class"]: g["bandwidth"]
        for g in fitted()["groups"]
        if g["backend"] == "cuda" and g["engine"] == "llama.cpp"
    }
    assert shares["datacenter"] >= 0.9 * shares["consumer"]
    scoreboard_a100 = [r for r in runs if r.raw["card"] == "A100 80GB PCIe"]
    assert all(0.9 < predicted_tok_s(r) / r.raw["tok_s"] < 1.1 for r in scoreboard_a100)


@pytest.mark.parametrize(
    ("card", "backend", "fmt", "tokens", "dequant", "scale"),
    [
        ("V100 32GB PCIe", "cuda", "q4_0", 63, False, 4 * 14 / 112),  # dp4a MMQ: 4 × the FP32 peak
        ("V100 32GB PCIe", "cuda", "q4_0", 64, True, 1.0),  # MMQ_DP4A_MAX_BATCH_SIZE: FP16 and cuBLAS
        ("V100 32GB PCIe", "cuda", "iq3_xxs", 2048, True, 1.0),
        ("V100 32GB PCIe", "cuda", "q4_0", 1, False, 14 / 112),  # a decode step's mat-vec: the FP32 peak's cores
        ("TITAN V 12GB", "cuda", "q4_k_m", 512, True, 1.0),
        ("V100 32GB PCIe", "cuda", "gguf_f16", 512, False, 1.0),  # float weights go to cuBLAS as they are
        ("V100 32GB PCIe", "vulkan", "q4_0", 512, False, 4 * 14 / 112),  # Vulkan's integer-dot shaders: no cuBLAS
        ("GeForce RTX 3090 24GB", "cuda", "q4_0", 512, False, 1.0),  # INT8 MMA: MMQ at every size
    ],
)
def test_volta_runs_dp4a_mmq_for_short_passes_and_fp16_cublas_for_long_ones(card, backend, fmt, tokens, dequant, scale):
    """ggml_cuda_should_use_mmq on a card with FP16 tensor cores and no INT8 MMA: MMQ (dp4a) below 64 tokens a pass,
    the weights dequantised to FP16 for cuBLAS from 64 on."""
    from core.speed.groups import fp16_dequant, matmul_peak

    c = card_named(card)
    assert bool(fp16_dequant(c, backend, fmt, tokens)) == dequant
    assert math.isclose(matmul_peak(c, backend, fmt, tokens).scale, scale)


def test_the_v100s_prompts_dip_at_64_tokens_a_pass_as_llama_cpp_runs_them():
    """PR #22298's V100 sweep: pp2048 ran at 64 tokens a pass at about half its rate at 32 (Q4_0: 641 against 1,164
    t/s), the first size llama.cpp converts the weights to FP16 for cuBLAS, every matrix of every pass. kvscope times
    the conversion (FP16 conversion in the formula) and its sweep dips there too; with one rate and a fill curve
    rising with the tokens it could not, and read the 64-token runs 2.5-3.2x fast. The fit's own formula gives the
    same figures as core.speed.predict. The sweep's runs read 0.8-1.4x (0.71-3.17x before), Q4_0's within 0.85-1.1x
    (the ends at 16 tokens, on the CUDA fill curve the ROCm and RTX 2060 sweeps of 2026-12-07 moved); the slowest to
    convert, IQ3_XXS (a grid lookup per weight), reads 1.42-1.56x at 64-128 tokens (1.45-1.55x before a V100's
    gpt-oss-20b runs joined the Volta class, session 67; 1.3-1.4x before the pooled fit
    weighed each machine alike, 2026-12-07; 1.4-1.5x before PR #24127's V100 sweep joined the fit, session 65, whose
    IQ2_XS reads the same 1.5x at 64 tokens)."""
    from core.speed.report import speed_lines
    from tests.bench.fit_corpus import load_rows, predicted_tok_s, start_params, terms

    rows = [
        r for r in load_rows()[0]
        if r.raw["card"] == "V100 32GB PCIe" and r.raw["source_id"].startswith("llamacpp-pr-22298")
    ]  # fmt: skip
    assert len(rows) == 27 and any(terms(r).dequant for r in rows) and not all(terms(r).dequant for r in rows)
    eff = efficiency_for("llama.cpp", "gpu", "cuda", "volta")
    assert 0 < eff.dequant_bandwidth < 1  # fitted: the conversion reaches a share of the bandwidth
    for r in rows:
        p = start_params(eff) | {f"{r.family}:prefill": eff.family_factor(r.family, True, "")}
        assert math.isclose(terms(r).tok_s(p), predicted_tok_s(r), rel_tol=1e-9)
        assert bool(terms(r).dequant) == (r.raw["n_ubatch"] >= 64)
    assert all(0.8 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.6 for r in rows)
    assert all(0.85 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.15 for r in rows if r.raw["weights"] == "Q4_0")
    q4 = {r.raw["n_ubatch"]: predicted_tok_s(r) for r in rows if r.raw["weights"] == "Q4_0"}
    assert q4[64] < 0.7 * min(q4[32], q4[128])  # measured: 641 at 64, 1,164 at 32 and 1,173 at 128
    setup = Setup(load_model("meta-llama/Llama-3.1-8B-Instruct"), configured("llama.cpp", n_ubatch=64),
                  card_named("V100 32GB PCIe"), weights="q4_0")  # fmt: skip
    text = "\n".join(speed_lines(predict(setup, Hardware(50.0, 8), 2048)))
    assert "FP16 conversion" in text and "cuBLAS" in text


def test_the_fp32_shader_rule_brings_the_published_vulkan_bf16_prompts_closer():
    """kyuz0's held-out BF16 runs on the Strix Halo's Vulkan backend (no BF16 run is in the fit): at the listed peak
    their prefill read 1.1-5.0x fast; at the FP32 shader rate, which the rule takes from the hardware and not from
    these runs, every one is within 0.8-2x."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    rows = [r for r in load_rows()[0] if r.kind == "prefill" and r.backend == "vulkan" and r.raw["weights"] == "BF16"]
    assert len(rows) >= 4 and all(r.held_out for r in rows)
    ratios = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows]
    assert all(0.8 < x < 2.0 for x in ratios)


@pytest.mark.parametrize(
    ("backend", "weights", "tokens", "tiled"),
    [
        ("vulkan", "gguf_bf16", 1, True),  # no mat-vec shader path for BF16 experts at any batch
        ("vulkan", "bf16", 1, True),
        ("vulkan", "q4_k_m", 8, False),
        ("vulkan", "q4_k_m", 9, True),  # past ggml_vk_use_mul_mat_vec_id's 8 tokens
        ("vulkan", "gguf_f16", 1, False),
        ("cuda", "gguf_bf16", 1, False),  # ggml-cuda's mmvf takes BF16 experts
        ("rocm", "gguf_bf16", 1, False),
    ],
)
def test_which_decode_steps_run_their_experts_through_the_tiled_matmul(backend, weights, tokens, tiled):
    assert bool(tiled_experts(backend, weights, tokens)) == tiled


def test_a_vulkan_bf16_moe_decode_times_its_experts_as_the_prompts_gemm_and_says_so(monkeypatch):
    """One decode step of Qwen3-30B-A3B in BF16 on the Strix Halo's Vulkan backend: its 8 routed experts run the
    tiled matmul with one token each, each padded to ggml-vulkan's 32-column small tile, which the plain FP32 shaders
    BF16 takes there compute whole: at the rate the experts' prompt fill curve gives a full tile. The dense matmuls
    and the bytes are untouched, the same step under ROCm (mat-vec) has no such term, and the formula says why."""
    predict_module = sys.modules["core.speed.predict"]  # the package exports the function under the same name
    from core.speed.report import part_lines

    card = card_named("AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB")

    def step(backend: str, weights: str = "gguf_bf16"):
        setup = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card, weights=weights)
        return predict(setup, Hardware(50.0, 8, backend=backend), 4096).decode

    vulkan, rocm = step("vulkan").parts[0], step("rocm").parts[0]
    eff = vulkan.efficiency
    half = eff.expert_half_tokens or eff.prefill_half_tokens  # the experts' own fill curve where one is fitted
    assert (vulkan.routed_tokens, vulkan.expert_columns, vulkan.expert_padding) == (1, 32, 32) and vulkan.whole_tiles
    gemm = vulkan.peak_gflops * 1e9 * eff.prefill_compute * 32 / (32 + half) / 32  # a full tile's rate ÷ 32 padded
    dense = (vulkan.matmul_flops - vulkan.expert_flops) / (vulkan.peak_gflops * 1e9 * eff.decode_compute)
    assert math.isclose(vulkan.matmul_s, dense + vulkan.expert_flops / gemm, rel_tol=1e-9)
    text = part_lines(step("vulkan"), prefill=False)[0]
    assert "routed experts" in text and "32 columns, ggml-vulkan's small tile" in text and "plain shaders" in text
    assert "ggml_vk_use_mul_mat_vec_id" in vulkan.expert_note and not rocm.expert_note
    assert not step("vulkan", "q8_0").parts[0].expert_note  # quantised experts take the mat-vec shaders
    q8 = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card, weights="q8_0")
    batched = [predict(q8, Hardware(50.0, 8, backend="vulkan"), 4096, batch=b).decode.parts[0] for b in (8, 9)]
    assert not batched[0].expert_note and "up to 8 tokens" in batched[1].expert_note  # 9 sequences: the tiled shader
    dense_model = Setup(load_model(MODEL), configured("llama.cpp"), card, weights="gguf_bf16")
    assert not predict(dense_model, Hardware(50.0, 8, backend="vulkan"), 4096).decode.parts[0].expert_note
    monkeypatch.setattr(predict_module, "expert_kernel", lambda *a: "")
    matvec = step("vulkan").parts[0]
    assert vulkan.matmul_s > 10 * matvec.matmul_s and vulkan.weights_s == matvec.weights_s
    assert vulkan.cache_s == matvec.cache_s and vulkan.attention_s == matvec.attention_s


def test_the_tiled_expert_rule_brings_the_published_vulkan_bf16_moe_decodes_closer():
    """kyuz0's held-out BF16 MoE decodes on the Strix Halo's Vulkan backend (no such run is in the fit) read 2.6-3.5x
    fast with the experts at the mat-vec rate; timed as the tiled matmul llama.cpp runs them through, each expert's one
    token padded to a whole 32-column tile at a prompt tile's rate, none reads faster and Qwen3-30B-A3B's come within a
    quarter (1.14-1.18x when this was written, 1.16-1.20x after session 67's refit on new Vulkan runs, 1.05-1.08x
    since the experts' roofline stands apart from the dense matmuls'). Qwen3.5-35B-A3B's read 1.7x until then, 1.3x
    since (test_the_routed_experts_roofline_stands_beside_the_dense_matmuls). The fit's own formula
    (fit_corpus.Terms) gives the same figures as core.speed.predict. These rows are not an
    independent check of the whole-tile rule: they are the runs that showed the rule before it 1.5-2.4x fast, and the
    shaders were read with them in view."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s, start_params, terms

    rows = [r for r in load_rows()[0] if r.kind == "decode" and r.backend == "vulkan" and r.raw["weights"] == "BF16"]
    assert len(rows) >= 5 and all(r.held_out for r in rows)
    ruled = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows]
    for r in rows:
        eff = efficiency_for("llama.cpp", "gpu", r.backend, r.klass)
        t = terms(r)
        assert (
            t.padding and t.whole_tiles and math.isclose(t.tok_s(start_params(eff)), predicted_tok_s(r), rel_tol=1e-9)
        )
    predict_module = sys.modules["core.speed.predict"]  # the package exports the function under the same name

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(predict_module, "expert_kernel", lambda *a: "")
        before = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows]
        assert not any(terms(r).padding for r in rows)
    assert all(1 < x <= y for x, y in zip(ruled, before, strict=True))
    qwen3 = [(x, y) for r, x, y in zip(rows, ruled, before, strict=True) if r.raw["model_id"] == "Qwen/Qwen3-30B-A3B"]
    assert len(qwen3) >= 3 and all(x < 1.25 and x < 0.5 * y for x, y in qwen3)


STRIX = "AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB"


def test_the_routed_experts_roofline_stands_beside_the_dense_matmuls():
    """A MoE layer's routed experts run in a kernel of their own (mul_mat_id) after the dense matmuls, so a pass takes
    the slower side of each: on the Strix Halo's Vulkan backend Qwen3.5-35B-A3B's BF16 decode reads its dense weights
    (bandwidth-bound) and then pads each expert's token to a whole tile (compute-bound). One roofline over both had
    hidden the dense read under the experts' compute: kyuz0's two held-out runs of it read 1.7x fast that way, and
    within a third with a roofline each. A dense model's pass is one roofline as before."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    setup = Setup(load_model("Qwen/Qwen3.5-35B-A3B"), configured("llama.cpp"), card_named(STRIX), weights="gguf_bf16")
    (part,) = predict(setup, Hardware(50.0, 8, backend="vulkan"), 4096).decode.parts
    eff = part.efficiency
    assert part.expert_weights_s == pytest.approx(
        part.expert_bytes / (part.bandwidth_gb_s * 1e9 * eff.bandwidth * eff.expert_bandwidth)
    )
    dense_read, dense_flops = part.weights_s - part.expert_weights_s, part.matmul_s - part.expert_matmul_s
    assert dense_read > dense_flops and part.expert_matmul_s > part.expert_weights_s  # one each way
    assert part.seconds == pytest.approx(
        dense_read + part.expert_matmul_s + max(part.cache_s, part.attention_s)
    ) and part.seconds > max(part.weights_s, part.matmul_s) + max(part.cache_s, part.attention_s)
    waits = part.waits  # the dense read waits on memory, the experts' tiles on compute
    assert waits["memory"] == pytest.approx(dense_read + (part.cache_s if part.cache_s >= part.attention_s else 0))
    assert waits["compute"] == pytest.approx(part.seconds - waits["memory"])
    dense = Setup(load_model("Qwen/Qwen3-8B"), configured("llama.cpp"), card_named(STRIX), weights="gguf_bf16")
    (d,) = predict(dense, Hardware(50.0, 8, backend="vulkan"), 4096).decode.parts
    assert not d.expert_matmul_s and d.seconds == pytest.approx(
        max(d.weights_s, d.matmul_s) + max(d.cache_s, d.attention_s)
    )

    rows = [
        r for r in load_rows()[0]
        if r.held_out and r.kind == "decode" and r.raw["model_id"] == "Qwen/Qwen3.5-35B-A3B"
        and r.raw["weights"] == "BF16" and r.backend == "vulkan"
    ]  # fmt: skip
    assert len(rows) == 2
    apart = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows]
    with pytest.MonkeyPatch.context() as mp:  # the one roofline over both kernels
        mp.setattr(type(part), "rooflines_s", property(lambda p: max(p.weights_s, p.matmul_s)))
        pooled = [predicted_tok_s(r) / r.raw["tok_s"] for r in rows]
    assert all(x > 1.6 for x in pooled) and all(1 < x < 1.33 for x in apart)


@pytest.mark.parametrize(
    ("card", "tokens", "tile"),
    [
        ("Radeon RX 7900 XTX 24GB", 9, 32),  # KHR_coopmat: s_wg_denoms 32 x 32
        ("Radeon RX 7900 XTX 24GB", 16, 32),
        ("Radeon RX 7900 XTX 24GB", 512, 32),  # 32 tokens an expert still fill one small tile
        ("GeForce RTX 4090 24GB", 9, 64),  # NV_coopmat2: s_mmqid_wg_denoms' 64 columns
        ("Radeon RX 7900 XTX 24GB", 1024, 32),  # 64 tokens an expert: two tiles
    ],
)
def test_a_tiled_decode_pads_each_touched_experts_tokens_to_the_small_tile(card, tokens, tile):
    """Qwen3-30B-A3B (128 experts, top 8) on Vulkan: a pass of n sequences touches 128 x (1 - (120/128)^n) experts
    on average, each with the rest of the n x 8 routings, computed as whole tiles of the small tile's columns."""
    from core.speed.predict import tiled_columns

    touched = 128 * (1 - (120 / 128) ** tokens)
    per_expert = tokens * 8 / touched
    columns = tile * math.ceil(per_expert / tile)
    routed, got_columns, padding = tiled_columns(card_named(card), "vulkan", tokens, 128, 8)
    assert (routed, got_columns) == (max(1, round(per_expert)), columns)
    assert math.isclose(padding, columns / per_expert, rel_tol=1e-12) and padding >= 1


def test_batched_vulkan_moe_decodes_past_eight_sequences_follow_the_published_cliff():
    """PR #27332's parent build (an unmodified master of August 2026) on a Strix Halo's Vulkan backend: Qwen3-30B-A3B
    Q4_K_M decoded 219 t/s over 8 sequences and 131 over 9, where llama.cpp leaves its mat-vec shaders for the tiled
    matmul (ggml_vk_use_mul_mat_vec_id), and climbed back to 294 at 32. kvscope pads each touched expert's few tokens
    to ggml-vulkan's 32-column small tile, at the prompt GEMMs' full rate (predict.tiled_columns, read from the
    shaders before these held-out runs were predicted with it): every run past 8 sequences is within a quarter (a
    fifth when it was written; 9 sequences read 1.21x after session 67's refit on new Vulkan runs), and the
    predicted aggregate falls from 8 to 9 sequences as the measured one does. Timed with the prompt's fill curve at
    their one token each (the rule before), they read 2.1-3.8x slow; left on the mat-vec path, 9 sequences would
    read faster than 8."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s

    rows = [r for r in load_rows()[0] if r.raw["source_id"] == "llamacpp-pr-27332-vulkan-mmv-id"]
    past = [r for r in rows if r.batch > 8]
    assert len(past) >= 5 and all(r.held_out for r in rows)
    assert all(0.8 <= predicted_tok_s(r) / r.raw["tok_s"] <= 1.25 for r in past)
    aggregate = {r.batch: predicted_tok_s(r) * r.batch for r in rows}
    measured = {r.batch: r.raw["tok_s"] * r.batch for r in rows}
    assert aggregate[9] < aggregate[8] and measured[9] < measured[8]
    predict_module = sys.modules["core.speed.predict"]  # the package exports the function under the same name
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(predict_module, "expert_kernel", lambda *a: "")
        matvec = {r.batch: predicted_tok_s(r) * r.batch for r in rows}
    assert matvec[9] > matvec[8]


def test_a_decode_on_the_tiled_expert_path_carries_that_paths_own_error(capsys):
    """The Strix Halo's Vulkan decodes whose experts took the tiled matmul (BF16 experts, and batched decodes past 8
    sequences) spread otherwise than the group's: 0.9-1.9x when the experts' roofline was pooled with the dense
    matmuls', 0.92-1.55x since it stands on its own (DevicePart.rooflines_s), against ±10 % typical over the group. A
    figure on that path carries the path's own bar, not the group's; a figure off it keeps the group's, and a group
    with no run on the path says "not checked"."""
    from tests.bench.fit_corpus import load_rows, path_errors, path_of, ratios

    held = ratios([r for r in load_rows()[0] if r.held_out])
    on_path = [x for r, x in held if path_of(r) == TILED_EXPERTS]
    entries = [e for e in path_errors(held) if e["path"] == TILED_EXPERTS]
    rows = len(on_path)
    assert rows >= 11 and [(e["kind"], e["backend"], e["card_class"], e["rows"]) for e in entries] == [
        ("decode", "vulkan", "apu", rows)
    ]
    assert math.isclose(entries[0]["ratio"], statistics.median(on_path))
    written = [e for e in fitted()["errors"] if e.get("path") == "tiled-experts"]
    assert [(e["rows"], round(e["ratio"], 6)) for e in written] == [(rows, round(entries[0]["ratio"], 6))]

    def bars(weights: str, card: str = STRIX, batch: int = 1):
        setup = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card_named(card), weights=weights)
        s = predict(setup, Hardware(50.0, 8, backend="vulkan"), 4096, batch=batch)
        return s.decode_error, s.prefill_error

    decode, prefill = bars("gguf_bf16")
    assert decode.rows == rows and "tiled matmul" in decode.label and f"{entries[0]['ratio']:.2f}×" in decode.label
    assert "tiled" not in prefill.label and prefill.rows > 5
    group, _ = bars("q8_0")
    assert "tiled" not in group.label and group.rows > rows and group.median != decode.median
    unchecked, _ = bars("q8_0", "Radeon RX 7900 XTX 24GB", batch=9)
    assert not unchecked.checked and "tiled matmul" in unchecked.label
    # the command line gives each batch's bar where they differ
    assert main(["speed", "Qwen/Qwen3-30B-A3B", "--gpu", STRIX, "--engine", "llama.cpp", "--weights", "Q8_0",
                 "--backend", "vulkan", "--context", "4k", "--batch", "1", "--batch", "9"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "decode error bar (batch 1): ±" in text and "decode error bar (batch 9): ±" in text
    assert text.count("prefill error bar: ") == 1


def test_a_moe_models_prompt_carries_the_error_of_its_groups_held_out_moe_prompts():
    """CUDA on consumer cards: its held-out prompts read within a fifth typically, but the MoE sweeps among them
    (PRs #20586 and #22298: experts fed a few tokens each) read 0.6-2.6x. A MoE model's prompt figure carries those
    runs' own error; a dense model's keeps the group's; a group without held-out MoE prompts (Metal) keeps its own
    and says it never had a MoE model."""
    from tests.bench.fit_corpus import load_rows, path_of, ratios

    held = ratios([r for r in load_rows()[0] if r.held_out and r.backend == "cuda" and r.klass == "consumer"])
    moe = [x for r, x in held if r.kind == "prefill" and path_of(r) == MOE_PROMPT]
    every = [x for r, x in held if r.kind == "prefill"]
    assert 0 < len(moe) < len(every)

    def prefill_bar(model: str, card: str = "GeForce RTX 4090 24GB"):
        setup = Setup(load_model(model), configured("llama.cpp"), card_named(card), weights="q4_k_m")
        return predict(setup, Hardware(50.0, 8), 4096).prefill_error

    bar = prefill_bar("Qwen/Qwen3-30B-A3B")
    assert (bar.rows, round(bar.median, 9)) == (len(moe), round(error_stats(moe)[0], 9))
    assert "for prompts of models with routed experts" in bar.label and "×" in bar.caveat
    dense = prefill_bar("Qwen/Qwen3-8B")
    assert (dense.rows, round(dense.median, 9)) == (len(every), round(error_stats(every)[0], 9))
    assert "routed experts" not in dense.label and not dense.caveat
    apple = prefill_bar("Qwen/Qwen3-30B-A3B", APPLE)
    assert apple.checked and "routed experts" not in apple.label and "no MoE model among them" in apple.caveat


@pytest.mark.parametrize(
    ("backend", "fmt", "tokens", "hidden", "looped"),
    [
        ("rocm", "gguf_bf16", 512, 2048, True),  # the down projection's 2,048 rows: MMF only up to 128 tokens
        ("cuda", "gguf_f16", 129, 2048, True),
        ("cuda", "gguf_bf16", 128, 2048, False),
        ("cuda", "gguf_bf16", 512, 1024, False),  # no matrix past 1,024 rows: MMF up to 512 tokens
        ("cuda", "gguf_bf16", 513, 1024, True),
        ("rocm", "q8_0", 2048, 2048, False),  # quantised experts: MMQ, one kernel for all
        ("vulkan", "gguf_bf16", 2048, 2048, False),  # another backend's mul_mat_id
    ],
)
def test_float_experts_past_mmfs_batch_limit_take_ggml_cudas_per_expert_loop(backend, fmt, tokens, hidden, looped):
    assert bool(expert_loop(backend, fmt, tokens, hidden)) == looped


@pytest.mark.parametrize(
    ("card", "fmt", "tokens", "looped"),
    [
        ("V100 32GB PCIe", "q4_0", 64, True),  # ggml_cuda_should_use_mmq fails for mul_mat_id from 64 tokens
        ("V100 32GB PCIe", "q4_0", 63, False),  # dp4a MMQ, its routing helper on the device
        ("TITAN V 12GB", "mxfp4", 2048, True),
        ("V100 32GB PCIe", "gguf_f16", 2048, False),  # float experts: expert_loop's rule, not this one
        ("GeForce RTX 3090 24GB", "q4_0", 2048, False),  # INT8 MMA: one MMQ kernel for every expert
    ],
)
def test_volta_multiplies_quantised_experts_one_at_a_time_from_64_tokens_a_pass(card, fmt, tokens, looped):
    """ggml_cuda_mul_mat_id (ggml-cuda.cu at 0c1e570): past the mat-vec sizes it takes MMQ only where
    ggml_cuda_should_use_mmq allows it, which on Volta's FP16-only tensor cores is below MMQ_DP4A_MAX_BATCH_SIZE
    tokens; from there it syncs for the routing and loops over the experts."""
    assert bool(volta_expert_loop(card_named(card), "cuda", fmt, tokens)) == looped


def test_a_float_moe_prompt_in_the_per_expert_loop_carries_that_paths_own_error():
    """The Strix Halo's ROCm BF16 prompts of Qwen3-30B-A3B and Qwen3.5-35B-A3B (held out; no such run is in the fit)
    go through ggml-cuda's per-expert loop: they read 0.9-2.6x, where the group's other MoE prompts read within a
    quarter typically. Such a prompt carries those runs' error; the same model quantised keeps the MoE prompts' bar; a
    prompt short enough for MMF does too; a CUDA card, with no held-out run on the path, says "not checked". The
    loop's other held-out runs are a V100's quantised DeepSeek-V2-Lite prompts at 64-256 tokens a pass (PR #17505),
    which take it on Volta (groups.volta_expert_loop), each group its own."""
    from tests.bench.fit_corpus import load_rows, path_of, ratios

    held = ratios([r for r in load_rows()[0] if r.held_out])
    looped = [(r, x) for r, x in held if path_of(r) == EXPERT_LOOP]
    kinds = {(r.backend, r.klass, r.raw["weights"]) for r, _ in looped}
    assert kinds == {("rocm", "apu", "BF16"), ("cuda", "volta", "Q4_0")}
    volta = [r for r, _ in looped if r.klass == "volta"]
    assert len(volta) == 3 and all(r.raw["n_ubatch"] >= MMQ_DP4A_MAX_BATCH_SIZE for r in volta)
    looped = [(r, x) for r, x in looped if r.backend == "rocm"]
    ratio = statistics.median(x for _, x in looped)
    assert len(looped) == 4 and ratio > 1.5
    moe = [x for r, x in held if path_of(r) == MOE_PROMPT and (r.backend, r.klass) == ("rocm", "apu")]

    def prefill_bar(weights: str, context: int = 4096, card: str = STRIX, backend: str = "rocm"):
        setup = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card_named(card), weights=weights)
        return predict(setup, Hardware(50.0, 8, backend=backend), context).prefill_error

    bar = prefill_bar("gguf_bf16")
    assert bar.rows == 4 and "one GEMM per expert" in bar.label and f"{ratio:.2f}×" in bar.caveat
    quantised = prefill_bar("q8_0")
    assert (quantised.rows, round(quantised.median, 9)) == (len(moe), round(error_stats(moe)[0], 9))
    assert "routed experts" in quantised.label and "one GEMM" not in quantised.label
    short = prefill_bar("gguf_bf16", context=100)  # one pass of 100 tokens: MMF
    assert short.rows == len(moe) and "one GEMM" not in short.label
    cuda = prefill_bar("gguf_bf16", card="GeForce RTX 4090 24GB", backend="cuda")
    assert not cuda.checked and "one GEMM per expert" in cuda.label


def test_the_tables_caption_gives_the_aggregates_own_error_bar():
    from core.speed.report import error_note

    row = {"decode_error": "±13 % a", "aggregate_error": "±13 % a", "aggregate_batch": 4}
    assert error_note([row]) == " Decode error bar: ±13 % a."
    tiled = row | {"aggregate_error": "not checked: b", "aggregate_batch": 12}
    assert error_note([row, tiled]) == " Decode error bar: ±13 % a. Aggregate error bar: not checked: b."
    assert error_note([row | {"aggregate_error": "x", "aggregate_batch": 1}]) == " Decode error bar: ±13 % a."
    assert error_note([]) == ""


# -- calibration -------------------------------------------------------------------------------------------------------


def cpu_setup(fmt: str) -> Setup:
    return Setup(load_model(MODEL), configured("llama.cpp"), Card.custom(1), weights=fmt)


def test_calibration_is_stored_and_loaded_per_host(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    assert cal_mod.load() is None
    cal = Calibration(host_key(), "2026-12-01 15:00 UTC", "test", 20.0, 2, (("Q8_0", 4.0, 40.0), ("Q4_K_M", 9.0, 30.0)))
    path = cal_mod.store(cal)
    assert path.parent == tmp_path and cal_mod.load() == cal
    other = replace(cal, host="another CPU | 64 cores", ram_gb_s=200.0)
    cal_mod.store(other)
    assert cal_mod.load() == cal and cal_mod.load(other.host) == other


def test_calibrated_rates_set_each_formats_cpu_speed():
    # a compute-bound CPU (slow kernels, fast RAM): each format at its own measured rate
    cal = Calibration(host_key(), "2026-12-01 15:00 UTC", "test", 500.0, 2, (("Q8_0", 1.0, 10.0), ("Q4_K_M", 2.0, 5.0)))
    hw = Hardware(500.0, 2, cpu_only=True, calibration=cal)
    q8, q4 = predict(cpu_setup("q8_0"), hw, 512), predict(cpu_setup("q4_k_m"), hw, 512)
    ratio = q4.decode.parts[0].matmul_s / q8.decode.parts[0].matmul_s
    assert math.isclose(ratio, 0.5, rel_tol=1e-9)  # same FLOPs at twice the rate
    assert q4.decode_tok_s > q8.decode_tok_s
    assert q8.decode_error.label.startswith("calibrated on this host at 2026-12-01 15:00 UTC")
    # a format not measured takes its family's rate (q6_k: the k-quant Q4_K_M's)
    q6 = predict(cpu_setup("q6_k"), hw, 512)
    assert math.isclose(q6.decode.parts[0].matmul_s, q4.decode.parts[0].matmul_s, rel_tol=1e-9)


@pytest.mark.parametrize("engine", ["transformers", "vllm"])
def test_a_calibration_times_llamacpps_kernels_only(engine):
    """`python -m core calibrate` times llama.cpp's CPU kernels: on a calibrated host transformers' and vLLM's CPU
    figures take its RAM figure and keep their own engine's rates, where before they took llama.cpp's measured ones
    (a calibration whose F16 rate was 7 GFLOP/s per thread made Qwen3-8B's vLLM prefill 10 times slower)."""
    cal = Calibration(host_key(), "2026-12-01 15:00 UTC", "test", 30.0, 2, (("F16", 3.0, 7.0), ("Q8_0", 1.0, 10.0)),
                      ((128, 0.1, 1.0, 0.25),))  # fmt: skip
    eng = configured(engine, platform="cpu") if engine == "vllm" else configured(engine)
    setup = Setup(load_model(MODEL), eng, Card.custom(1), weights="bf16")
    calibrated = predict(setup, Hardware(30.0, 2, cpu_only=True, calibration=cal), 8192)
    plain = predict(setup, Hardware(30.0, 2, cpu_only=True), 8192)
    assert calibrated.decode_tok_s == plain.decode_tok_s and calibrated.prefill_tok_s == plain.prefill_tok_s
    rate = efficiency_for(engine, "cpu").prefill_compute
    assert math.isclose(calibrated.prefill.parts[0].matmul_gflops, 2 * rate, rel_tol=1e-9)
    for bar in (calibrated.decode_error, calibrated.prefill_error):  # nor does its error bar offer the calibration
        assert "calibrat" not in bar.label
    # llama.cpp's own figures on the same host do take the measured rates, and say so
    llama = predict(cpu_setup("q8_0"), Hardware(30.0, 2, cpu_only=True, calibration=cal), 8192)
    assert math.isclose(llama.prefill.parts[0].matmul_gflops, 2 * 10.0, rel_tol=1e-9)
    assert llama.decode_error.label.startswith("calibrated on this host at 2026-12-01 15:00 UTC")


def test_calibrated_attention_rates_set_the_cpu_attention_time():
    widths = ((64, 0.1, 1.0, None), (128, 0.5, 4.0, None), (256, 2.0, 8.0, None))  # Qwen3-8B's heads are 128 wide
    cal = Calibration(host_key(), "2026-12-01 15:00 UTC", "test", 500.0, 2, (("Q8_0", 1.0, 10.0),), widths)
    hw = Hardware(500.0, 2, cpu_only=True, calibration=cal)
    s = predict(cpu_setup("q8_0"), hw, 8192)
    dec, pre = s.decode.parts[0], s.prefill.parts[0]
    assert math.isclose(dec.attention_s, dec.attention_flops / (2 * 0.5e9), rel_tol=1e-9)
    assert math.isclose(pre.attention_s, pre.attention_flops / (2 * 4.0e9), rel_tol=1e-9)
    assert cal.attention_rate(False, 80) == 0.1 and cal.attention_rate(True, 200) == 8.0  # the nearest width
    # without a measured attention rate the fitted one stays
    plain = predict(cpu_setup("q8_0"), replace(hw, calibration=replace(cal, attention=())), 8192)
    rate = efficiency_for("llama.cpp", "cpu").decode_attention
    assert math.isclose(plain.decode.parts[0].attention_s, dec.attention_flops / (2 * rate * 1e9), rel_tol=1e-9)


def test_a_calibrated_cache_rate_streams_the_decode_cache():
    """A decode step reads the cache at this host's measured per-thread stream (at the nearest width); a prefill,
    whose keys come from the CPU's caches, and an uncalibrated host read it at the RAM bandwidth × efficiency."""
    widths = ((64, 0.1, 1.0, 9.0), (128, 2.0, 4.0, 0.25))
    cal = Calibration(host_key(), "2026-12-01 15:00 UTC", "test", 500.0, 2, (("Q8_0", 1.0, 10.0),), widths)
    s = predict(cpu_setup("q8_0"), Hardware(500.0, 2, cpu_only=True, calibration=cal), 8192)
    dec, pre = s.decode.parts[0], s.prefill.parts[0]
    assert dec.cache_gb_s == 2 * 0.25 and math.isclose(dec.cache_s, dec.cache_bytes / 0.5e9, rel_tol=1e-9)
    assert dec.cache_s > dec.attention_s  # 0.25 GB/s per thread sets the attention's share of the step
    assert math.isclose(dec.seconds, max(dec.weights_s, dec.matmul_s) + dec.cache_s, rel_tol=1e-9)
    bandwidth = 500e9 * pre.efficiency.bandwidth
    assert pre.cache_gb_s == 0 and math.isclose(pre.cache_s, pre.cache_bytes / bandwidth, rel_tol=1e-9)
    plain = predict(cpu_setup("q8_0"), Hardware(500.0, 2, cpu_only=True), 8192).decode.parts[0]
    assert plain.cache_gb_s == 0 and math.isclose(plain.cache_s, plain.cache_bytes / bandwidth, rel_tol=1e-9)


def test_an_isas_fitted_cache_rate_streams_an_uncalibrated_decode_cache():
    """Uncalibrated, a CPU whose ISA has a fitted cache stream reads the decode's cache at it; another ISA, or an
    unknown one, at the RAM bandwidth × efficiency; a calibration's own measured stream wins over the ISA's."""
    eff = replace(efficiency_for("llama.cpp", "cpu"), isa_cache=(("avx2", 0.25),))
    table = {("llama.cpp", "cpu"): eff}

    def decode(isa: str, calibration: Calibration | None = None):
        hw = Hardware(500.0, 2, cpu_only=True, isa=isa, calibration=calibration)
        return predict(cpu_setup("q8_0"), hw, 8192, table=table).decode.parts[0]

    fitted_isa = decode("avx2")
    assert fitted_isa.cache_gb_s == 2 * 0.25 and fitted_isa.cache_note == "as fitted on AVX2 CPUs"
    assert math.isclose(fitted_isa.cache_s, fitted_isa.cache_bytes / 0.5e9, rel_tol=1e-9)
    for other in ("avx512", ""):
        plain = decode(other)
        assert plain.cache_gb_s == 0 and plain.cache_note == ""
        assert math.isclose(plain.cache_s, plain.cache_bytes / (500e9 * eff.bandwidth), rel_tol=1e-9)
    cal = Calibration(host_key(), "t", "test", 500.0, 2, (("Q8_0", 1.0, 10.0),), ((128, 0.5, 4.0, 1.5),))
    assert decode("avx2", cal).cache_gb_s == 2 * 1.5


def test_a_calibrated_cache_rate_is_in_the_printed_formula():
    from core.speed.report import speed_lines
    from tests.test_app_formulas import evaluate, formulas

    cal = Calibration(host_key(), "t", "test", 500.0, 2, (("Q8_0", 1.0, 10.0),), ((128, 0.5, 4.0, 0.25),))
    lines = speed_lines(predict(cpu_setup("q8_0"), Hardware(500.0, 2, cpu_only=True, calibration=cal), 8192))
    cache = [line for line in lines if "B ÷ (2 threads × 250,000,000 B/s)" in line]
    assert len(cache) == 1  # the decode step's; the prefill's reads at the bandwidth
    assert "(streamed as this host's calibration measured it)" in cache[0]
    checked = 0
    for left, printed in formulas(cache[0]):
        got, want = evaluate(left)[0], evaluate(printed)[0]
        assert got == pytest.approx(want, rel=2e-3, abs=2e-6), (cache[0], got, want)
        checked += 1
    assert checked >= 4


def test_the_calibrate_command_prints_each_widths_cache_stream(capsys):
    from core.speed.cli import print_calibration

    cal = Calibration(
        host_key(), "t", "test", 20.0, 2, (("F16", 7.6, 79.6),), ((64, 2.5, 31.1, 1.31), (128, 13.9, 40.9, None))
    )
    print_calibration(cal.record() | {"stored": "/tmp/x", "warning": None})
    lines = capsys.readouterr().out.splitlines()
    (d64,) = [line for line in lines if "attn d=64" in line]
    (d128,) = [line for line in lines if "attn d=128" in line]
    assert "2.5" in d64 and "31.1" in d64 and "decode cache 1.31 GB/s/thread" in d64
    assert "13.9" in d128 and "decode cache" not in d128  # a record from before the split has none


def test_attention_rates_split_the_cache_stream_from_the_flops():
    """Synthetic timings of an MHA and a GQA attention model, each decode step the slower of its cache stream and its
    FLOPs: the MHA model is timed by its bytes, the GQA one (a quarter the bytes, the same FLOPs) by its FLOPs, and
    attention_rates gives back both rates and the MHA model's prefill rate."""
    from core.speed.calibrate import CONTEXT, DEEP, attention_rates

    threads, dec_rate, stream, pre_rate, mm_s = 2, 3e9, 1.5e9, 12e9, 0.01  # per thread: FLOP/s, B/s, FLOP/s; s

    def at(n: int, kv_heads: int) -> dict:
        per_key, key_bytes = 4 * 512 * 2, 2 * 2 * kv_heads * 64 * 2  # FLOPs; f16 K and V bytes; 2 layers
        step = 0.002 + n * max(per_key / dec_rate, key_bytes / stream) / threads
        prefill = mm_s * n / CONTEXT + per_key * n * (n + 1) / 2 / (threads * pre_rate)
        return {"threads": threads, "context": n, "decode_s": step, "prefill_s": prefill}

    runs = {}
    for label, kv_heads in (("64", 8), ("64-gqa", 2)):
        m = {"hidden": 512, "ffn": 64, "layers": 2, "heads": 8, "kv_heads": kv_heads, "vocab": 1000}
        runs[label] = {"model": m, "base": at(CONTEXT, kv_heads), "deep": at(DEEP, kv_heads)}
    ((d, dec, pre, gb_s),) = attention_rates(runs, threads)
    assert d == 64 and math.isclose(dec * 1e9, dec_rate, rel_tol=1e-9)
    assert math.isclose(gb_s * 1e9, stream, rel_tol=1e-9) and math.isclose(pre * 1e9, pre_rate, rel_tol=1e-9)
    # a deep run no slower than its matmuls (noise) measures nothing
    flat = {k: r | {"deep": r["deep"] | {"decode_s": r["base"]["decode_s"], "prefill_s": r["base"]["prefill_s"] * 8}}
            for k, r in runs.items()}  # fmt: skip
    assert attention_rates(flat, threads) == ((64, None, None, None),)


def test_a_calibrated_rate_follows_the_thread_count_it_was_timed_at():
    """A decode step memory-bound at every thread gives a smaller rate per thread at 4 threads than at 1; a figure at 1
    thread takes the 1-thread rate, one at all 4 the 4-thread rate, one between them lies between, and a calibration
    without 1-thread rates (stored before they were timed, or timed with one thread) keeps its one rate."""
    cal = Calibration(host_key(), "t", "test", 20.0, 4, (("F16", 10.0, 90.0),), single=(("F16", 25.0, 100.0),))
    assert cal.rate("F16", False, 1) == 25.0 and cal.rate("F16", False, 4) == 10.0 and cal.rate("F16", False) == 10.0
    assert cal.rate("F16", False, 2) == 20.0 and cal.rate("F16", True, 1) == 100.0 and cal.rate("F16", False, 8) == 10
    assert cal.rate("gguf_f16", False, 1) == 25.0 and cal.rate("Q4_0", False, 1) is None
    assert Calibration.of(cal.record()) == cal
    old = cal.record()
    del old["single"]
    assert Calibration.of(old).single == () and Calibration.of(old).rate("F16", False, 1) == 10.0
    # a prediction with one thread times the matmuls at the 1-thread rate, with four at the 4-thread one
    one, four = (predict(cpu_setup("gguf_f16"), Hardware(20.0, t, cpu_only=True, calibration=cal), 512) for t in (1, 4))
    part1, part4 = one.decode.parts[0], four.decode.parts[0]
    assert math.isclose(part1.matmul_s, part1.matmul_flops / (25.0 * 1e9), rel_tol=1e-9)
    assert math.isclose(part4.matmul_s, part4.matmul_flops / (4 * 10.0 * 1e9), rel_tol=1e-9)


def test_a_calibration_stored_before_attention_was_timed_still_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    old = {"host": host_key(), "time": "t", "method": "m", "ram_gb_s": 20.0, "threads": 2, "rates": [["F16", 1, 2]]}
    for attention in (None, [0.5, 4.0]):  # none at all; one (decode, prefill) pair, before head widths
        record = old | ({"attention": attention} if attention else {})
        (tmp_path / cal_mod.FILE).write_text(json.dumps({"hosts": {host_key(): record}}))
        loaded = cal_mod.load()
        assert loaded is not None and loaded.attention == () and loaded.rate("gguf_f16", True) == 2
    three = Calibration.of(old | {"attention": [[128, 0.5, 4.0]]})  # before the cache stream was timed apart
    assert three.attention == ((128, 0.5, 4.0, None),) and three.cache_rate(128) is None
    cal = replace(Calibration.of(old), attention=((128, 0.5, None, 2.5),))
    assert Calibration.of(cal.record()) == cal  # what store writes, load reads back


def test_cpu_error_bars_point_to_calibration_and_cite_its_check(tmp_path, monkeypatch):
    from core.speed import groups

    plain = predict(cpu_setup("q8_0"), Hardware(50.0, 2, cpu_only=True), 512).decode_error
    assert plain.label.endswith("`python -m core calibrate` times this host")
    check = {"cpu": "Some CPU | 2 cores", "band": 0.25, "figures": 24, "within": 14, "median": 0.21}
    (tmp_path / "check.json").write_text(json.dumps({"hosts": [check]}))
    monkeypatch.setattr(groups, "CALIBRATED_CHECK", tmp_path / "check.json")
    groups.calibrated_check.cache_clear()
    try:
        cal = Calibration(host_key(), "2026-12-01 15:00 UTC", "test", 50.0, 2, (("Q8_0", 1.0, 10.0),))
        label = predict(cpu_setup("q8_0"), Hardware(50.0, 2, cpu_only=True, calibration=cal), 512).decode_error.label
        assert "checked on one host (Some CPU | 2 cores): 14 of 24 figures" in label and "median error 21 %" in label
        assert "(uncalibrated: ±" in label
        other = check | {"cpu": "Other CPU | 4 cores", "figures": 36, "within": 36, "median": 0.06}
        (tmp_path / "check.json").write_text(json.dumps({"hosts": [check, other]}))
        groups.calibrated_check.cache_clear()
        text = groups.calibrated_check_text()  # two hosts pool their figures and keep their own medians
        assert "checked on 2 hosts (Some CPU | 2 cores; Other CPU | 4 cores): 50 of 60 figures" in text
        assert "median error 21 %, 6 % by host" in text
    finally:
        groups.calibrated_check.cache_clear()
    recorded = groups.calibrated_check()  # the repository's own record, written by make bench-speed
    assert recorded is not None and 0 <= recorded["within"] <= recorded["figures"] > 0
    assert f"{recorded['within']} of {recorded['figures']} figures" in groups.calibrated_check_text()


def test_calibrate_command_numpy_stores_for_this_host(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KVSCOPE_CACHE", str(tmp_path))
    out = run_json(capsys, "calibrate", "--with", "numpy", "--threads", "1")
    assert out["host"] == host_key() and out["ram_gb_s"] > 0 and out["rates"][0][2] > 0
    loaded = cal_mod.load()
    assert loaded is not None and loaded.rate("gguf_f16", prefill=True) == out["rates"][0][2]
    assert loaded.rate("q4_k_m", prefill=True) is None  # numpy runs no quantised kernel
    speed = run_json(capsys, "speed", MODEL, "--device", "cpu", "--engine", "llama.cpp", "--context", "4096")
    assert speed["ram_source"].startswith("calibrated on this host") and speed["calibration"]["host"] == host_key()


def test_the_attention_models_caches_are_past_the_cpu_caches():
    """The attention models' f16 caches at 2,048 tokens are 64 MiB (2-layer models' 8-34 MB stayed in this Xeon's
    caches and timed real models' attention 1.6-1.8x too fast): 8 heads × d wide K and V, 2 bytes, per layer
    4 MiB at d = 64, 8 MiB at 128, 16 MiB at 256; the grouped models' 2 K/V heads a quarter of that."""
    from core.speed.calibrate import DEEP, HEAD_DIMS, attention_models

    models = attention_models(HEAD_DIMS)
    assert DEEP == 2048 and [models[f"{d}"]["layers"] for d in HEAD_DIMS] == [16, 8, 4]
    assert [models[f"{d}-gqa"]["layers"] for d in HEAD_DIMS] == [64, 32, 16]
    assert all(m["hidden"] == m["heads"] * d for d in HEAD_DIMS for m in (models[f"{d}"], models[f"{d}-gqa"]))
    assert {(m["heads"], m["kv_heads"]) for m in models.values()} == {(8, 8), (8, 2)}
    assert attention_models((64,), deep=65536)["64"]["layers"] == 2  # never fewer than two


def test_llamacpp_calibration_runs_the_real_kernels(tmp_path, monkeypatch):
    """libllama quantises a tiny random GGUF and times it; Q4_0 reads fewer bytes than F16 per decode step; the
    128-wide attention models give a decode FLOP rate, a cache stream and a prefill rate."""
    from core.speed.calibrate import calibrate, engines_python

    if engines_python() is None:
        pytest.fail("the engines' venv cannot import llama_cpp; run `make engines`")
    tiny = {"hidden": 256, "ffn": 768, "layers": 2, "heads": 4, "vocab": 1000}
    cal = calibrate(2, "llama.cpp", ("F16", "Q4_0"), model=tiny, head_dims=(128,))
    assert cal.method.startswith("llama.cpp") and {r[0] for r in cal.rates} == {"F16", "Q4_0"}
    assert all(dec > 0 and pre > 0 for _, dec, pre in cal.rates + cal.single)
    assert {r[0] for r in cal.single} == {"F16", "Q4_0"} and cal.single != cal.rates  # timed again with one thread
    ((d, dec, pre, gb_s),) = cal.attention
    assert d == 128 and dec and dec > 0 and pre and pre > 0 and gb_s and gb_s > 0  # a deep cache costs a step more


def test_llamacpp_decode_attention_costs_per_k_v_head_not_per_query_head():
    """What the cache stream rests on, asked of llama.cpp itself: 8 query heads reading 2 K/V heads (GQA) take well
    under the time per query head and key that 8 reading 8 (MHA) take, the same FLOPs from a quarter of the bytes.
    Were the attention's cost its FLOPs, the two would match."""
    from core.speed.calibrate import CONTEXT, DEEP, engines_python, llamacpp_runs

    python = engines_python()
    if python is None:
        pytest.fail("the engines' venv cannot import llama_cpp; run `make engines`")
    tiny = {"hidden": 256, "ffn": 256, "layers": 1, "heads": 4, "vocab": 1000}
    runs = llamacpp_runs(python, 1, ("F16",), tiny, head_dims=(128,))["attention"]

    def per_head_key(r: dict) -> float:
        m = r["model"]
        return (r["deep"]["decode_s"] - r["base"]["decode_s"]) / ((DEEP - CONTEXT) * m["layers"] * m["heads"])

    mha, gqa = per_head_key(runs["128"]), per_head_key(runs["128-gqa"])
    assert 0 < gqa < 0.75 * mha, (gqa, mha)


# -- the corpus fit and the bench table --------------------------------------------------------------------------


def test_fit_and_table_on_a_few_corpus_rows(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from tests.bench import fit_corpus

    lines = [r for r in fit_corpus.corpus_lines() if r.get("model_id") and r["backend"] == "metal"][:12]
    assert lines, "no Metal rows with a model_id in measurements/speed/corpus"
    (tmp_path / "few.jsonl").write_text("\n".join(json.dumps(r) for r in lines))
    monkeypatch.setattr(fit_corpus, "CORPUS", tmp_path)
    monkeypatch.setattr(fit_corpus, "DEVICE_RUNS", tmp_path / "no-device-runs.jsonl")
    rows, _ = fit_corpus.load_rows()
    assert len(rows) == len(lines)
    terms = [fit_corpus.terms(r) for r in rows]
    start = fit_corpus.start_params(efficiency_for("llama.cpp", "gpu"))
    fitted_p = fit_corpus.descend(terms, start, fit_corpus.fit_keys(terms), None, rounds=15)
    assert fit_corpus.loss(terms, fitted_p, None) < fit_corpus.loss(terms, start, None)
    stats = fit_corpus.error_groups(fit_corpus.ratios(rows))
    text = fit_corpus.table(stats, "title")
    assert "Metal on Apple silicon" in text and stats[("decode", "*", "*", "*")].rows + stats.get(
        ("prefill", "*", "*", "*"), fit_corpus.Stat(0, 0, 0, 1)
    ).rows == len(rows)


def test_held_out_split_is_by_source_and_card():
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_corpus import held_out, kvscope_format

    assert held_out("a", "b") == held_out("a", "b")
    assert {held_out(f"s{i}", "card") for i in range(30)} == {True, False}
    assert all(held_out(f"kvscope-device-s{i}", "card") for i in range(30))  # this project's own runs: never fitted
    assert kvscope_format("Q4_K - Medium") == "q4_k_m"
    assert kvscope_format("MXFP4 MoE") == "mxfp4_moe"
    assert kvscope_format("F16") == "gguf_f16"


def test_each_gpt_oss_gguf_is_read_as_the_format_its_published_file_size_says():
    """llama-bench prints 'MXFP4 MoE' for llama.cpp's mxfp4_moe file type (experts MXFP4, every other tensor Q8_0)
    and 'F16' for a GGUF that keeps the experts MXFP4 and the rest 16-bit: gpt-oss ships its experts as MXFP4, which
    the converter writes as they are in every type. kvscope's GGUF of each must be the file llama-bench reported
    (size_bytes), within 1 %: the two differ by 12-14 %, and a swap misplaces the bytes a decode step reads (27 %
    too many per token for gpt-oss-20b's MXFP4 MoE file); an F16 that widened the experts was 3.0× the real file.
    The F16 files of both models come out to the byte of what llama-bench printed (its size is the tensors' bytes).
    Any other type in the corpus (a mixture a quantiser chose per tensor) within 2 %."""
    sys.path.insert(0, str(ROOT))
    from core.dtypes import dtype_named
    from core.engines.base import sized_tensors
    from core.model.params import count_params
    from tests.bench.fit_corpus import corpus_lines, kvscope_format, model_of

    files = {
        (r["model_id"], r["weights"], r["size_bytes"])
        for r in corpus_lines()
        if (r.get("model_id") or "").startswith("openai/gpt-oss") and r.get("size_bytes")
    }

    def size(model_id: str, weights: str) -> int:
        model = model_of(model_id)
        tensors = sized_tensors(count_params(model), kvscope_format(weights), dtype_named(model.dtype).block_bytes)
        return sum(b for _, b in tensors)

    sized = {(m, w, printed): size(m, w) for m, w, printed in files}
    ours = {f for f in files if f[1] in ("MXFP4 MoE", "F16")}
    assert {w for _, w, _ in ours} == {"MXFP4 MoE", "F16"} and len({m for m, _, _ in ours}) == 2
    assert all(abs(sized[f] / f[2] - 1) < 0.01 for f in ours)
    assert {f[:2] for f in ours if sized[f] == f[2]} == {("openai/gpt-oss-20b", "F16"), ("openai/gpt-oss-120b", "F16")}
    # other types: unsloth's dynamic 'UD-Q8_K_XL', printed as Q8_0, keeps a few tensors wider than Q8_0 (1.7 %)
    assert all(abs(sized[f] / f[2] - 1) < 0.02 for f in files - ours)


def test_old_builds_are_build_numbers_not_commit_hashes():
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_corpus import OLD_BUILD, old_run

    def old_build(build: str | None) -> bool:
        return old_run({"build": build, "source_id": "a-source"})

    assert old_build(f"b{OLD_BUILD - 1} (4426e298)") and old_build(f"b{OLD_BUILD - 1}")
    assert not old_build(f"b{OLD_BUILD}") and not old_build(None)
    # llama-bench prints a commit hash when built outside a release: 'b8e09f0' is not build 8
    assert not old_build("b8e09f0") and not old_build("b43556e")


def test_runs_of_an_unnumbered_january_2024_source_count_as_old_builds():
    """PR #4766's tables print no build number but date from January 2024, before CUDA graphs: their decode steps
    carry the old builds' extra overhead (a nuisance term of the fit), not the current one."""
    from tests.bench.fit_corpus import old_run

    assert old_run(_corpus_row("llamacpp-pr-4766-backend-sched-jg", "GeForce RTX 3090 24GB", "decode", "Q4_0"))
    assert old_run(_corpus_row("xiongjiedai-llama3", "A100 80GB PCIe", "decode", "F16"))  # b2824
    assert not old_run(_corpus_row("llamacpp-disc-15013-cuda", "A100 80GB PCIe", "decode", "Q4_0"))  # 5143fa8


def test_old_builds_decoded_further_from_the_bandwidth_than_current_ones():
    """The corpus' own evidence for the old builds' bandwidth factor: an RTX 3090 decoded Llama 2 7B Q4_0 in January
    2024 (PR #4766) at 119.9 tok/s, an RTX 3090 Ti with 8 % more bandwidth at 171-172 in 2025 (discussion #15013):
    per GB/s of the card, the current build is over 1.3x as fast. A per-pass overhead alone cannot carry that much
    of a 7B model's step, so the fit gives old builds a bandwidth factor too, and CUDA's is below 1."""
    from tests.bench.fit_corpus import old_run

    old = _corpus_row("llamacpp-pr-4766-backend-sched-jg", "GeForce RTX 3090 24GB", "decode", "Q4_0")
    new = _corpus_row("llamacpp-disc-15013-cuda", "GeForce RTX 3090 Ti 24GB", "decode", "Q4_0")
    assert old_run(old) and not old_run(new)
    per_gb_s = lambda r: r["tok_s"] / card_named(r["card"]).bandwidth_gb_s  # noqa: E731
    assert per_gb_s(new) / per_gb_s(old) > 1.3
    cuda = next(
        g for g in fitted()["groups"] if (g["engine"], g["backend"], g["card_class"]) == ("llama.cpp", "cuda", "*")
    )
    assert 0 < cuda["old_build"]["bandwidth"] < 1 and cuda["old_build"]["overhead_s"] > 0


def test_the_check_times_old_builds_with_their_own_terms_and_core_never_reads_them():
    """A held-out run of an old build is predicted with its group's constants and the old builds' terms fitted on
    the fit rows (fit_corpus.old_build_table), the same figure the fit's own formula gives it; a current build's
    run gets no such table, and core's entries are the same with or without the `old_build` field. (A prompt over
    several cards is compared on one card's runs only: the fit times its passes one after another, the prediction
    pipelines them.)"""
    from core.speed.efficiency import entry
    from tests.bench.fit_corpus import load_rows, old_build_table, old_run, predicted_tok_s, start_params, terms

    rows = load_rows()[0]
    old = [r for r in rows if r.held_out and old_run(r.raw, r.klass) and r.klass == "datacenter"]
    current = [r for r in rows if r.held_out and r.raw["card"] == "H200 141GB SXM" and r.kind == "decode"]
    assert old and current and all(old_build_table(r) is None for r in current)
    group = next(g for g in fitted()["groups"] if (g["engine"], g["backend"], g["card_class"]) == old[0].group)
    assert entry(group) == entry({k: v for k, v in group.items() if k != "old_build"})
    for r in old:
        eff = efficiency_for("llama.cpp", "gpu", r.backend, r.klass)
        timed = old_build_table(r)[("llama.cpp", "gpu")]
        assert timed.bandwidth == eff.bandwidth * group["old_build"]["bandwidth"]
        assert timed.overhead_step_s == eff.overhead_step_s + group["old_build"]["overhead_s"]
        p = start_params(eff) | {f"{r.family}:{r.kind}": eff.family_factor(r.family, r.kind == "prefill", "")}
        p |= {"old_bandwidth": group["old_build"]["bandwidth"], "old_overhead_s": group["old_build"]["overhead_s"]}
        one_card = r.kind == "decode" or r.raw.get("n_devices", 1) == 1
        fit_formula, predicted = terms(r).tok_s(p), predicted_tok_s(r, old_build_table(r))
        assert not one_card or math.isclose(fit_formula, predicted, rel_tol=1e-9), r.raw
        assert predicted < predicted_tok_s(r)


def _run(build: str | None, depth: int, tok_s: float, **other) -> dict:
    test = {"source_id": "a-source", "card": "a card", "backend": "vulkan", "kind": "prefill", "model": "m"}
    test |= {"weights": "Q8_0", "n_prompt": 2048, "n_gen": 0, "n_ubatch": 512, "flash_attn": True}
    return test | {"build": build, "depth": depth, "tok_s": tok_s} | other


def test_a_run_a_newer_build_beat_at_a_deeper_context_is_superseded():
    """A deeper cache only adds work, so an older build slower than a newer one at a deeper context timed its own
    slowness; the other way round, or across builds that cannot be ordered, nothing can be told."""
    from tests.bench.fit_corpus import superseded

    old, new = _run("b7423 (2aa45ef9)", 16384, 777.0), _run("b8577 (2405d59c)", 32768, 1760.0)
    assert superseded([old, new]) == {0}
    assert superseded([old, new | {"tok_s": 700.0}]) == set()  # deeper and slower: as it should be
    assert superseded([old, new | {"build": "b7423 (2aa45ef9)"}]) == set()  # one build: no build to blame
    assert superseded([old, new | {"depth": 16384}]) == set()  # not deeper
    assert superseded([old | {"build": "b8e09f0"}, new]) == set()  # a commit hash alone has no order
    for key, value in (("source_id", "b"), ("card", "b"), ("backend", "rocm"), ("n_ubatch", 2048), ("weights", "F16")):
        assert superseded([old, new | {key: value}]) == set(), key  # another machine or test


def test_the_corpus_runs_set_aside_as_superseded_each_have_their_newer_deeper_faster_twin():
    from tests.bench.fit_corpus import SAME_TEST, build_number, corpus_lines, load_rows, superseded

    lines = corpus_lines()
    gone = superseded(lines)
    assert gone, "kyuz0's b7423 column is slower than deeper runs of later builds"
    for i in gone:
        r = lines[i]
        assert any(
            all(s.get(k) == r.get(k) for k in SAME_TEST) and build_number(s.get("build")) > build_number(r["build"])
            and s["depth"] > r["depth"] and s["tok_s"] > r["tok_s"] for s in lines if build_number(s.get("build"))
        ), r  # fmt: skip
    gemma = [lines[i] for i in gone if lines[i]["source_id"] == "kyuz0-strix-gemma-3-4b-it-q3_k_s"]
    assert {(r["backend"], r["kind"], r["tok_s"]) for r in gemma} >= {("vulkan", "prefill", 776.82)}
    rows, skipped = load_rows()
    assert skipped["superseded: a newer build ran the same test deeper and faster"] == len(gone)
    assert not any(r.raw == lines[i] for r in rows for i in gone)


def test_the_held_out_interval_resamples_whole_units_not_rows():
    """Two held-out units of ten runs each, one all within ±20 % and one all 2× off: drawn by unit, the share within
    ±20 % can only be 0, ½ or 1, so its 90 % interval spans 0–1; drawn by row it would sit near ½."""
    from types import SimpleNamespace

    from tests.bench.fit_corpus import unit_interval

    def run(source: str, ratio: float, kind: str = "decode") -> tuple[SimpleNamespace, float]:
        return SimpleNamespace(kind=kind, raw={"source_id": source, "card": "a card"}), ratio

    results = [run("a", 1.0) for _ in range(10)] + [run("b", 2.0) for _ in range(10)] + [run("c", 9.0, "prefill")]
    share = lambda xs: error_stats(xs)[1]  # noqa: E731
    assert unit_interval(results, "decode", share) == (0.0, 1.0)
    assert unit_interval([*results[:10], results[-1]], "decode", share) == (1.0, 1.0)  # the prefill run is not drawn
    lo, hi = unit_interval(results, "decode", lambda xs: error_stats(xs)[0])
    assert lo == 0.0 and hi == 1.0


def test_a_pascal_run_is_never_an_old_build():
    """The old builds' extra overhead is a step without CUDA graphs; Pascal runs without them in current builds too
    (ggml-cuda disables graphs below compute capability 7.0), so its January 2024 runs are not set apart."""
    from tests.bench.fit_corpus import load_rows, old_run

    p40 = _corpus_row("llamacpp-pr-4766-backend-sched-jg", "Tesla P40 24GB", "decode", "Q4_0")
    assert old_run(p40) and not old_run(p40, "pascal")
    rows = [r for r in load_rows()[0] if r.raw["source_id"] == "llamacpp-pr-4766-backend-sched-jg"]
    assert {r.klass for r in rows if "P40" in r.raw["card"]} == {"pascal"}
    assert any(old_run(r.raw, r.klass) for r in rows if "3090" in r.raw["card"])


def test_an_apu_run_from_a_superseded_build_stays_out_of_the_fit_and_the_check():
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_corpus import APU_CURRENT_BUILD, CORPUS, build_number, to_row

    def first(name: str) -> dict:
        return json.loads((CORPUS / f"{name}.jsonl").read_text().splitlines()[0])

    strix = first("kyuz0-strix-llama-2-7b.q4_0")
    assert to_row(strix).klass == "apu"
    for build in (f"b{APU_CURRENT_BUILD - 1} (83bc2f28)", "7f7669b", None):  # older, or no build number to tell
        with pytest.raises(InputError, match="superseded"):
            to_row(strix | {"build": build})
    assert to_row(strix | {"build": f"b{APU_CURRENT_BUILD}"}).klass == "apu"
    spark = first("llamacpp-benches-dgx-spark")  # CUDA on an APU: the same rule
    assert spark["backend"] == "cuda" and build_number(spark["build"]) < APU_CURRENT_BUILD
    with pytest.raises(InputError, match="superseded"):
        to_row(spark)
    assert to_row(spark | {"build": f"b{APU_CURRENT_BUILD}"}).klass == "apu"
    # the rule is the APUs': a discrete card's run from any build stays in
    a100 = next(r for r in map(json.loads, (CORPUS / "xiongjiedai-llama3.jsonl").read_text().splitlines())
                if r["card"] == "A100 80GB PCIe")  # fmt: skip
    assert a100["build"].startswith("b2824") and to_row(a100).klass == "datacenter"


def test_the_cpu_fit_runs_through_the_corpus_loss_and_lowers_it():
    """fit_cpu.py fits with fit_corpus's loss; when that loss took a weight per row, the CPU rows had none and the CPU
    fit stopped with an AttributeError for a day. One recorded CPU's 16 rows: the fit must run and end below its
    start."""
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_corpus import loss
    from tests.bench.fit_cpu import NEUTRAL, _Row, fit, format_rows

    rows = [r for r in format_rows() if r["cpu"] == "AMD EPYC (family 25, model 1, AVX2)"][:16]  # its first record
    assert len(rows) == 16
    p = fit(rows)
    start = NEUTRAL | {k: 1.0 for k in p if ":" in k}
    items = [_Row(r) for r in rows]
    assert loss(items, p, None) < 0.8 * loss(items, start, None)


def test_the_pooled_prior_weighs_each_backend_alike_whatever_its_rows():
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_corpus import backend_weighted, load_rows, terms

    rows = [r for r in load_rows()[0] if not r.held_out][::7]
    pooled = backend_weighted(rows, {id(r): terms(r) for r in rows})
    share: dict[str, float] = {}
    for r, t in zip(rows, pooled, strict=True):
        share[r.backend] = share.get(r.backend, 0.0) + t.weight
    assert len(share) >= 3 and len({r.backend for r in rows}) == len(share)
    assert all(math.isclose(w, 1.0) for w in share.values())
    # and within a backend each machine alike, however many runs it has
    machines: dict[tuple, float] = {}
    for r, t in zip(rows, pooled, strict=True):
        machines[(r.backend, r.unit)] = machines.get((r.backend, r.unit), 0.0) + t.weight
    for backend in share:
        mine = [w for (b, _), w in machines.items() if b == backend]
        assert all(math.isclose(w, 1 / len(mine)) for w in mine), backend
    assert any(sum(1 for r in rows if (r.backend, r.unit) == key) > 1 for key in machines)  # some machine has several


def test_bench_speed_corpus_section_runs():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bench" / "bench_speed.py"), "--corpus"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "held-out error" in out.stdout and "decode within ±20 %" in out.stdout
    # the CPU target read both ways: the uncalibrated defaults, and calibrated figures on every recorded host but
    # the one the calibration's choices were made on
    hosts = json.loads(CALIBRATED_CHECK.read_text(encoding="utf-8"))["hosts"]
    others = [h for h in hosts if "family" in h["cpu"]]  # CPUs named by family and model came after those choices
    assert 0 < len(others) < len(hosts)
    within, figures = sum(h["within"] for h in others), sum(h["figures"] for h in others)
    assert "% uncalibrated — " in out.stdout
    assert f"on {len(others)} CPUs the calibration was not built on: " in out.stdout
    assert f"({within} of {figures} figures of models it never ran" in out.stdout


def test_without_flash_attention_the_scores_go_through_memory():
    """Decode at c tokens: each of Qwen3-8B's 36 layers stores 32 heads × c scores, F32 written and read twice."""
    cfg = load_model(MODEL).config
    layers, heads = cfg["num_hidden_layers"], cfg["num_attention_heads"]
    hw, context = Hardware(50.0, 8), 8192
    on = predict(setup_on("GeForce RTX 4090 24GB"), hw, context)
    off = predict(setup_on("GeForce RTX 4090 24GB", flash_attn=False), hw, context)
    extra = off.decode.parts[0].cache_bytes - on.decode.parts[0].cache_bytes
    assert extra == 16 * layers * heads * context


@pytest.mark.parametrize("expert_half", [0.0, 16.0])
@pytest.mark.parametrize(("backend", "columns"), [("cuda", 128), ("rocm", 32)])
def test_routed_experts_fill_with_the_tokens_routed_to_each(expert_half, backend, columns):
    """Qwen3-30B-A3B (128 experts, top-8): a 512-token pass gives each expert 32 tokens on average, and their GEMMs
    fill by the experts' own curve where the entry has one (else the dense pass's). On CUDA each expert's 32 tokens
    run as a 128-column MMQ tile, the one llama.cpp picks for the pass's 512 tokens; ROCm's fit is left without it."""
    model = load_model("Qwen/Qwen3-30B-A3B")
    card = "GeForce RTX 4090 24GB" if backend == "cuda" else "Radeon RX 7900 XTX 24GB"
    setup = Setup(model, configured("llama.cpp"), card_named(card), weights="q4_k_m")
    half = 64.0
    eff = replace(
        efficiency_for("llama.cpp", "gpu", backend, "consumer"), prefill_half_tokens=half,
        expert_half_tokens=expert_half, families=(),
    )  # fmt: skip
    s = predict(setup, Hardware(50.0, 8, backend=backend), 512, table={("llama.cpp", "gpu"): eff})
    p = s.prefill.parts[0]
    rate = p.peak_gflops * 1e9 * eff.prefill_compute
    experts_per_token = model.config["num_experts_per_tok"] / model.config["num_local_experts"]
    routed = 512 * experts_per_token
    own = expert_half or half
    by_hand = (p.matmul_flops - p.expert_flops) / (rate * 512 / (512 + half)) + p.expert_flops / (
        rate * routed / (columns + own)
    )
    assert 0 < p.expert_flops < p.matmul_flops and math.isclose(p.matmul_s, by_hand, rel_tol=1e-9)
    assert ("128 columns of llama.cpp's MMQ tiles" in p.tile_note) == (backend == "cuda")


@pytest.mark.parametrize(
    ("tokens", "tile"),
    # mul_mat_q_switch_J tries J = 8, 16, ... 48, 64, 80, ... 128 (the tiles mmq-config-ampere.cuh has) and keeps the
    # first with the fewest ceil(tokens / J) tiles
    [
        (1, 8),
        (9, 16),
        (41, 48),
        (49, 64),
        (64, 64),
        (100, 112),
        (128, 128),
        (129, 80),
        (200, 112),
        (256, 128),
        (300, 112),
        (2048, 128),
    ],
)
def test_mmq_picks_the_first_column_tile_with_the_fewest_tiles(tokens, tile):
    assert mmq_tile(tokens) == tile


@pytest.mark.parametrize(
    ("backend", "fmt", "tokens", "routed", "columns"),
    [
        ("cuda", "q4_0", 256, 24, 128),  # DeepSeek-V2-Lite at -ub 256: 24 tokens an expert, one 128-column tile
        ("cuda", "mxfp4", 2048, 256, 256),  # gpt-oss-20b at -ub 2048: two full tiles, nothing padded
        ("cuda", "q4_k_m", 200, 13, 112),  # a 200-token pass: two 112-column tiles
        ("cuda", "q8_0", 64, 2, 64),
        ("cuda", "gguf_bf16", 512, 32, 32),  # float experts: MMF or the per-expert loop, no MMQ tiles
        ("cuda", "q4_0", 8, 1, 1),  # the mat-vec kernels
        ("rocm", "q4_0", 256, 24, 24),  # not taken for ROCm (RDNA3 and RDNA4 size tiles per expert since #28552)
        ("vulkan", "q4_0", 256, 24, 24),
        ("metal", "q4_0", 256, 24, 24),
    ],
)
def test_cuda_pads_each_experts_tokens_to_the_passs_mmq_tile(backend, fmt, tokens, routed, columns):
    assert expert_columns(backend, fmt, tokens, routed) == columns


def test_padding_the_experts_to_the_mmq_tile_brings_the_published_cuda_moe_sweeps_closer():
    """The published micro-batch sweeps of MoE prompts on CUDA (the fit's DeepSeek-V2-Lite on an RTX 3090, #15525;
    the held-out gpt-oss-20b on an RTX 3090, #20586) read up to 2.5x fast when each expert's GEMM filled with its
    own tokens: the larger the micro-batch, the faster they read, as the tile llama.cpp picks for the pass grows
    past an expert's share. Timed over the padded columns, with the constants on disk (fitted so), each sweep's
    ratios stay within a narrow band; without the padding, the same constants read the large micro-batches faster
    than the small ones by more than that band."""
    from tests.bench.fit_corpus import load_rows, ratios

    predict_module = sys.modules["core.speed.predict"]
    rows = [
        r for r in load_rows()[0]
        if r.raw["source_id"] in ("llamacpp-pr-15525-mmq-moe-device", "llamacpp-pr-20586-fa-stream-k")
        and r.kind == "prefill" and "RTX 3090" in r.raw["card"]
    ]  # fmt: skip
    assert len({r.raw["source_id"] for r in rows}) == 2 and len(rows) >= 10
    padded = {id(r): x for r, x in ratios(rows)}
    for source in ("llamacpp-pr-15525-mmq-moe-device", "llamacpp-pr-20586-fa-stream-k"):
        sweep = [padded[id(r)] for r in rows if r.raw["source_id"] == source]
        assert max(sweep) / min(sweep) < 2.1 and all(0.6 < x < 1.7 for x in sweep), sweep
    unpadded_columns = predict_module.expert_columns
    try:
        predict_module.expert_columns = lambda backend, fmt, tokens, routed: routed
        unpadded = {id(r): x for r, x in ratios(rows)}
    finally:
        predict_module.expert_columns = unpadded_columns
    big = [r for r in rows if r.raw["n_ubatch"] >= 128]
    assert all(unpadded[id(r)] > 1.5 * padded[id(r)] for r in big)


# -- MMQ's tile traffic ---------------------------------------------------------------------------------------------


def test_mmq_tiles_move_the_weights_once_per_column_tile_and_the_activations_once_per_row_tile():
    """By hand: a 512-token pass runs four 128-column tiles, so 1 GB of dense weights crosses memory 4 times; 0.5 GB
    of routed experts, each padded to 256 columns, twice; and 2 TFLOP of matmuls (1e12 weight-activation products)
    read their q8_1 activations (144 bytes per 128 values) once per 128-row tile: 1e12 × 1.125 ÷ 128 bytes. A
    200-token pass: two tiles (of 112 columns)."""
    assert mmq_traffic_bytes(1e9, 0.5e9, 2e12, 512, 256) == 4e9 + 1e9 + 1e12 * 1.125 / 128
    assert mmq_traffic_bytes(1e9, 0.0, 0.0, 200, 0) == 2e9


@pytest.mark.parametrize(
    ("card", "backend", "fmt", "tokens", "tiled"),
    [
        ("DGX Spark", "cuda", "q8_0", 2048, True),
        ("RTX 4090", "cuda", "mxfp4", 512, True),
        ("T4", "cuda", "q4_0", 512, True),  # Turing: int8 MMA
        ("RTX 4090", "cuda", "f16", 512, False),  # cuBLAS
        ("RTX 4090", "cuda", "q4_0", 8, False),  # the mat-vec kernels
        ("RTX 4090", "vulkan", "q4_0", 512, False),  # Vulkan's own matmul shaders
        ("Tesla P40", "cuda", "q4_0", 512, False),  # Pascal: dp4a MMQ, 64-row tiles
        ("TITAN V", "cuda", "q4_0", 512, False),  # Volta: cuBLAS for long batches
    ],
)
def test_mmq_tile_traffic_is_timed_for_cuda_int8_mma_prompts_only(card, backend, fmt, tokens, tiled):
    assert mmq_traffic(card_named(card), backend, fmt, tokens) is tiled


def test_a_spark_prompt_is_timed_by_its_mmq_tiles_and_says_so():
    """Qwen3-8B Q8_0 in one 2,048-token pass on a DGX Spark (273 GB/s): 6,945,767,424 matmul weights (36 layers of
    4,096 × (4,096 + 1,024 + 1,024 + 4,096) + 3 × 4,096 × 12,288, from the config) at 34 bytes per 32 cross memory
    16 times, and 2,048 × that many activation bytes × 1.125 ÷ 128 once per row tile: about 243 GB, more time at the
    fitted share than the pass's FLOPs take, so the tiles set the matmuls' time, and the formula says why."""
    from core.speed.report import part_lines

    setup = Setup(
        load_model(MODEL), configured("llama.cpp", n_ubatch=2048, n_batch=2048, flash_attn=True),
        card_named("DGX Spark"), weights="q8_0",
    )  # fmt: skip
    timing = predict(setup, Hardware(ram_gb_s=50.0, threads=8), 2048).prefill
    (part,) = timing.parts
    params = 36 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 12288)
    assert math.isclose(part.tile_bytes, params * 34 / 32 * 16 + params * 2048 * 1.125 / 128, rel_tol=1e-3)
    eff = part.efficiency
    assert 0 < eff.tile_traffic <= 1
    assert math.isclose(part.tile_s, part.tile_bytes * eff.tile_traffic / (273e9 * eff.bandwidth), rel_tol=1e-12)
    assert part.tile_s > max(part.weights_s, part.matmul_s)
    assert math.isclose(part.seconds, part.tile_s + max(part.cache_s, part.attention_s), rel_tol=1e-12)
    line = part_lines(timing, prefill=True)[0]
    assert "MMQ's tiles:" in line and "once per 128-column tile" in line and "their tiles and matmuls" in line
    f16 = predict(replace(setup, weights="fp16"), Hardware(ram_gb_s=50.0, threads=8), 2048).prefill.parts[0]
    assert f16.tile_bytes == f16.tile_s == 0.0 and "MMQ" not in part_lines(replace(timing, parts=(f16,)), True)[0]


def test_the_tile_share_is_the_most_no_fit_run_beats_and_never_more_than_all_the_traffic():
    """fit_corpus.tile_ceiling on hand-made runs: each run allows the share at which its tiles take the time its
    measurement leaves beside the rest of its pass; the least wins, so the run that sets it is then predicted at
    exactly its measured speed and no run slower than measured. A run whose tiles could take more than all of the
    no-reuse traffic allows no more than 1. Runs without tiles set nothing."""
    from tests.bench.fit_corpus import Terms, tile_ceiling

    p = {"prefill_compute": 1.0, "prefill_attention": 1.0, "flash_off": 1.0, "prefill_half_tokens": 1e-9,
         "bandwidth": 0.5, "expert_bandwidth": 1.0, "overhead_step_s": 0.0, "overhead_recurrent_s": 0.0,
         "overhead_moe_s": 0.0}  # fmt: skip

    def run(measured_s: float, tiles: float) -> Terms:
        # 1 s of matmuls, 0.5 s of attention, 1,000 tokens: predicted at 1.5 s without tiles
        return Terms(0.1, 1.0, 0.0, 0.5, 1, True, True, "legacy", 1000, 1000 / measured_s, 1000, 0, tiles=tiles)

    slow, slower, untiled = run(2.0, 2.0), run(3.0, 2.0), run(1.0, 0.0)
    # the slow run leaves 1.5 s for its tiles: 2 unit seconds at bandwidth 0.5 take 4 s at share 1, so 0.375 fits
    assert tile_ceiling([slow, slower, untiled], p) == 1.5 * 0.5 / 2.0
    share = tile_ceiling([slow, slower], p)
    assert math.isclose(slow.tok_s(p | {"tile_traffic": share}), slow.measured, rel_tol=1e-12)
    assert slower.tok_s(p | {"tile_traffic": share}) > slower.measured
    assert tile_ceiling([run(9.0, 0.5)], p) == 1.0  # 8.5 s left: a share of 8.5 would be more than the tiles move
    assert tile_ceiling([untiled], p) == 0.0


def test_the_fit_times_a_tile_bound_prompt_as_the_prediction_does():
    """The DGX Spark's dense prompts, where the tiles set the pass's time: the fit's formula (fit_corpus.Terms with
    the entry's share) and core.speed.predict agree."""
    from tests.bench.fit_corpus import _timing, load_rows, predicted_tok_s, start_params, terms

    rows = [r for r in load_rows()[0] if r.kind == "prefill" and r.raw["card"].startswith("DGX Spark")]
    bound = [r for r in rows if any(q.tile_s > max(q.weights_s, q.matmul_s) for q in _timing(r, None)[0].parts)]
    assert len(bound) >= 5
    for r in rows:
        eff = efficiency_for("llama.cpp", "gpu", r.backend, r.klass)
        p = start_params(eff) | {f"{r.family}:prefill": eff.family_factor(r.family, True, "")}
        assert math.isclose(terms(r).tok_s(p), predicted_tok_s(r), rel_tol=1e-9), r.raw


# -- a CPU's vector ISA -------------------------------------------------------------------------------------------


def _records(name: str) -> list[dict]:
    """A run record as fit_cpu.py reads it (its one reader), failing where the file is missing or empty."""
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_cpu import recorded

    runs = recorded(ROOT / "measurements" / "speed" / name)
    assert runs, name
    return runs


def test_the_same_zen4_core_runs_llama_cpps_quantised_prefill_faster_with_avx512():
    """Measured, not predicted: two Zen 4 EPYC VMs (family 25, model 17), one with AVX-512 and one whose hypervisor
    hides it, timed by fit_cpu.py --record on the same random-weight model. F16's prefill per thread barely moves;
    Q4_K_M's runs well over twice as fast with AVX-512. This is what fit_cpu.py's per-ISA kernel factors rest on."""
    runs = _records("llamacpp_cpu_formats.jsonl")

    def prefill(isa: str, fmt: str, threads: int) -> float:
        (r,) = [r for r in runs if r["cpu"].startswith("AMD EPYC (family 25, model 17") and r["isa"] == isa
                and r["format"] == fmt and r["threads"] == threads]  # fmt: skip
        return r["prefill_tok_s"]

    for threads in (1, 2):
        assert 0.9 < prefill("avx512", "F16", threads) / prefill("avx2", "F16", threads) < 1.3
        assert prefill("avx512", "Q4_K_M", threads) / prefill("avx2", "Q4_K_M", threads) > 2.0
    assert {r["isa"] for r in runs} == {"avx512", "avx2"}  # every recorded row says which


def test_a_cpu_figure_takes_its_vector_isas_kernel_factor_and_says_so():
    from core.speed.report import speed_lines

    setup = Setup(load_model(MODEL), configured("llama.cpp"), Card.custom(1), weights="q4_k_m")
    f16 = replace(setup, weights="fp16")

    def on(isa: str, s: Setup = setup):
        return predict(s, Hardware(25.0, 2, cpu_only=True, isa=isa), 512)

    eff = efficiency_for("llama.cpp", "cpu")
    assert {i for i, *_ in eff.isa_families} == {"avx512", "avx2"}
    # k-quant prefill: AVX-512 hosts well ahead of AVX2 ones, as the two Zen 4 VMs and the Xeon showed
    assert 1.5 < on("avx512").prefill_tok_s / on("avx2").prefill_tok_s < 3.5
    # float kernels take no family factor: the ISA changes nothing there
    assert on("avx512", f16).prefill_tok_s == on("avx2", f16).prefill_tok_s == on("", f16).prefill_tok_s
    assert "as fitted on AVX-512 CPUs" in "\n".join(speed_lines(on("avx512")))
    assert "pooled over the CPUs fitted (the CPU's vector ISA not known)" in "\n".join(speed_lines(on("")))
    assert "kernels at" not in "\n".join(speed_lines(on("avx512", f16)))


def test_the_cli_host_takes_this_cpus_isa_only_when_its_bandwidth_is_this_machines(monkeypatch):
    from core.speed import cli as speed_cli

    monkeypatch.setattr(speed_cli, "host_isa", lambda: "avx512")
    monkeypatch.setattr(speed_cli, "ram_bandwidth", lambda: RamBandwidth(30.0, 20.0, 4, "measured here"))
    assert speed_cli.hardware(None, 2, cpu_only=True)[0].isa == "avx512"
    assert speed_cli.hardware(40.0, 2, cpu_only=True)[0].isa == ""  # --ram-gbs may describe another machine


def test_cpu_isa_flag_describes_another_machines_cpu(capsys):
    argv = ("speed", "Qwen/Qwen3-8B", "--device", "cpu", "--engine", "llama.cpp", "--weights", "Q4_K_M",
            "--context", "4k", "--ram-gbs", "40", "--threads", "8")  # fmt: skip
    given = run_json(capsys, *argv)
    assert given["cpu_isa"] is None  # a bandwidth given for another machine says nothing of its ISA
    avx512, avx2 = (run_json(capsys, *argv, "--cpu-isa", isa) for isa in ("avx512", "avx2"))
    assert (avx512["cpu_isa"], avx2["cpu_isa"]) == ("avx512", "avx2")
    assert 1.5 < avx512["rows"][0]["prefill_tok_s"] / avx2["rows"][0]["prefill_tok_s"] < 3.5
    assert run_json(capsys, *argv, "--cpu-isa", "other")["rows"] == given["rows"]
    with pytest.raises(SystemExit):
        main(["speed", "Qwen/Qwen3-8B", "--device", "cpu", "--cpu-isa", "sse2"])
    assert "invalid choice" in capsys.readouterr().err


def _bench_table(text: str) -> dict[str, tuple[float, float]]:
    """make bench-speed's llama.cpp table: id → (decode, prefill) as measured (its 'measured' columns)."""
    section = text.split("== llama.cpp (llama-cpp-python")[1].split("\n\n")[0]
    row = re.compile(r"\s*(llama-\w)\s+(\d)\s+([\d,]+) \|\s+[\d.]+\s+([\d.]+)\s+\S+ \|\s+[\d.]+\s+([\d.]+)")
    return {
        f"{m[1]}/{m[2]}t/{m[3].replace(',', '')}": (float(m[4]), float(m[5]))
        for m in map(row.match, section.splitlines())
        if m
    }


def test_transcribed_host_runs_match_the_bench_outputs_they_cite():
    """The hosts whose make bench-speed output is all that is left of their runs: each transcribed row must carry the
    measured figures of the file (and commit) it names, every row of that file's table once."""
    runs = _records("llamacpp_cpu_hosts.jsonl")
    cited = {r["run"]["source"].split()[2] for r in runs if r["run"]["source"].startswith("transcribed from ")}
    assert cited
    for path in cited:
        rows = {r["id"]: r for r in runs if r["run"]["source"].split()[2:3] == [path]}
        commit = next(iter(rows.values()))["run"]["commit"]
        text = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True).stdout
        table = _bench_table(text or (ROOT / path).read_text())
        assert len(table) == 18 and set(rows) == set(table)
        for key, (decode, prefill) in table.items():
            assert (rows[key]["decode_tok_s"], rows[key]["prefill_tok_s"]) == (decode, prefill)


def test_the_same_zen4_core_decodes_a_deep_cache_far_faster_with_avx512():
    """Measured, not predicted: speed_runs' llama-s (F16, flash attention) on the two Zen 4 VMs. At 256 tokens the
    decode step is mostly weights and AVX-512 gains little; at 4096 the cache's attention dominates and AVX-512 runs
    it several times as fast. Their prefill at 4096 shows no such gap. (A decode attention rate per ISA fitted on
    this checked worse on CPUs it was not fitted on, so the defaults pool it: tests/bench/fit_cpu.py fit_isa.)"""
    runs = {(r["run"]["machine"]["isa"], r["id"]): r for r in _records("llamacpp_cpu_hosts.jsonl")
            if r["run"]["machine"]["cpu"].startswith("AMD EPYC (family 25, model 17")}  # fmt: skip

    def ratio(kind: str, case: str) -> float:
        return runs["avx512", case][f"{kind}_tok_s"] / runs["avx2", case][f"{kind}_tok_s"]

    for threads in (1, 2):
        assert ratio("decode", f"llama-s/{threads}t/256") < 2.0
        assert ratio("decode", f"llama-s/{threads}t/4096") > 2.5
        assert 0.7 < ratio("prefill", f"llama-s/{threads}t/4096") < 1.4


def test_the_cpu_check_reads_each_hosts_deep_runs_with_its_ram_figure_and_isa():
    sys.path.insert(0, str(ROOT))
    from tests.bench.fit_cpu import HOSTS, run_rows

    rows = run_rows(HOSTS)
    assert len(rows) == 2 * len(_records("llamacpp_cpu_hosts.jsonl")) >= 108  # a decode and a prefill per run
    assert {r["hw"].isa for r in rows} == {"avx2", "avx512"}
    assert max(r["context"] for r in rows) == 4096 and {r["hw"].threads for r in rows} == {1, 2}
    zen4 = [r for r in rows if r["cpu"] == "AMD EPYC (family 25, model 17, AVX-512)"]
    assert {r["hw"].ram_gb_s for r in zen4} == {24.8}  # that host's bench output's own RAM figure


def test_recording_a_hosts_deep_runs_replaces_only_that_cpus_rows(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from tests.bench import fit_cpu

    hosts = tmp_path / "hosts.jsonl"
    other = {"id": "llama-s/1t/256", "model": "llama-s", "run": {"machine": {"cpu": "Other CPU"}}}
    mine = {"id": "llama-s/1t/256", "model": "llama-s", "run": {"machine": {"cpu": fit_cpu.cpu_name()}}}
    hosts.write_text(json.dumps(other) + "\n" + json.dumps(mine) + "\n")
    fresh = [{"id": f"llama-s/1t/{c}", "decode_tok_s": 1.0, "prefill_tok_s": 2.0} for c in (256, 4096)]
    monkeypatch.setattr(fit_cpu, "HOSTS", hosts)
    monkeypatch.setattr(fit_cpu, "time_llamacpp", lambda: fresh)
    monkeypatch.setattr(fit_cpu, "engines_versions", lambda: {"llama_cpp_python": "test"})
    fit_cpu.record_hosts(20.0)
    lines = [json.loads(x) for x in hosts.read_text().splitlines()]
    assert lines[0] == other  # another CPU's runs are kept as they were
    assert [r["id"] for r in lines[1:]] == ["llama-s/1t/256", "llama-s/1t/4096"]  # this CPU's: the new run only
    assert all(r["run"]["machine"]["cpu"] == fit_cpu.cpu_name() and r["run"]["ram_copy_gb_s"] == 20.0
               for r in lines[1:])  # fmt: skip
    assert all(r["run"]["machine"]["mhz"] == fit_cpu.cpu_mhz() for r in lines[1:])  # the clock beside the name


def test_the_fit_times_a_deep_moe_prompt_as_the_prediction_does():
    """A prompt run at depth is fitted as the prefill to depth + n less the prefill to depth (fit_corpus.minus). The
    difference must keep what the overhead is counted from, the layers with routed experts among them: the fit's
    formula (fit_corpus.Terms) and core.speed.predict then give such a row the same figure, as they do every other
    row the fit sees (a prompt over several GPUs is never fitted: Terms times its passes one after another, where
    predict overlaps them in llama.cpp's pipeline)."""
    from tests.bench.fit_corpus import load_rows, predicted_tok_s, start_params, terms

    rows = [
        r
        for r in load_rows()[0]
        if r.kind == "prefill"
        and r.raw.get("depth")
        and r.raw["n_devices"] == 1
        and r.raw["model_id"] == "Qwen/Qwen3-30B-A3B"
        and efficiency_for("llama.cpp", "gpu", r.backend, r.klass).overhead_moe_s > 0
    ]
    assert len({r.backend for r in rows}) >= 2 and len(rows) >= 6
    for r in rows:
        eff = efficiency_for("llama.cpp", "gpu", r.backend, r.klass)
        t = terms(r)
        assert t.moe == 48
        p = start_params(eff) | {f"{r.family}:prefill": eff.family_factor(r.family, True, "")}
        assert math.isclose(t.tok_s(p), predicted_tok_s(r), rel_tol=1e-9), r.raw


def test_a_step_split_with_the_cpu_says_its_cpu_part_is_not_checked():
    """Every held-out GPU run had the whole model on the card: a figure with layers (-ngl) or experts (--n-cpu-moe)
    in system RAM carries its GPU group's error and says that the CPU's part of it is not covered."""
    setup = setup_on("GeForce RTX 4060 8GB")
    whole = predict(setup, Hardware(60.0, 8), 8192)
    split = predict(replace(setup, gpu_layers=20), Hardware(60.0, 8), 8192)
    layers = len(setup.model.layers)
    assert "not checked here" not in whole.decode_error.label.split("no held-out run split")[0]
    for bar in (split.decode_error, split.prefill_error):
        assert bar.group == whole.decode_error.group
        # -ngl 20: the output layer and the last 19 decoder layers on the GPU (llama.cpp counts the output as one)
        assert f"{layers - 19} of {layers} layers run on the CPU from system RAM (-ngl)" in bar.label
        assert "no held-out run split a model so" in bar.label
    moe = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card_named("GeForce RTX 4060 8GB"),
                weights="q4_k_m", cpu_experts=range(30))  # fmt: skip
    label = predict(moe, Hardware(60.0, 8), 8192).decode_error.label
    assert "the routed experts of 30 layers run on the CPU (--n-cpu-moe)" in label
    assert "no held-out run split" not in predict(setup, Hardware(60.0, 8, cpu_only=True), 8192).decode_error.label


def test_a_prompt_runs_the_matmuls_of_layers_in_ram_on_the_gpu_after_a_pcie_copy():
    """llama.cpp's scheduler runs a matmul whose weight sits in host memory on the GPU once the pass has 32 rows
    (ggml-backend.cpp "1.off"; offload_op in ggml-cuda.cu and ggml-vulkan.cpp), copying the weight over PCIe each
    pass; the attention stays with its cache in RAM. Shorter passes (and decode) keep the CPU's matmuls."""
    from core.memory.llamacpp_compute import OP_OFFLOAD_MIN_BATCH

    base = replace(setup_on("GeForce RTX 4060 8GB"), gpu_layers=20)
    long, short = base, replace(base, engine=base.engine.with_ubatch(OP_OFFLOAD_MIN_BATCH - 1))
    hw = Hardware(60.0, 8)
    s = predict(long, hw, 8192)
    cpu, copied = [p for p in s.prefill.parts if p.device == "cpu"], [p for p in s.prefill.parts if p.copy_bytes]
    assert len(cpu) == len(copied) == 1 and copied[0].device == "gpu" and "op offload" in copied[0].copy_note
    assert cpu[0].matmul_flops == 0 and cpu[0].attention_flops > 0 and copied[0].attention_flops == 0
    # every pass copies the weights of the 17 layers in RAM: the decode step's CPU part reads them once
    passes = math.ceil(8192 / 512)
    assert copied[0].copy_bytes == pytest.approx(passes * s.decode.parts[1].weight_bytes, rel=1e-9)
    half = predict(long, replace(hw, pcie_gb_s=hw.pcie_gb_s / 2), 8192).prefill
    assert next(p.copy_s for p in half.parts if p.copy_bytes) == pytest.approx(2 * copied[0].copy_s)
    assert not any(p.copy_bytes for p in predict(short, hw, 8192).prefill.parts)
    assert not any(p.copy_bytes for p in s.decode.parts)  # one token a step
    assert any(p.copy_bytes for p in predict(base, replace(hw, backend="vulkan"), 8192).prefill.parts)  # its own


def test_an_intel_vulkan_decode_says_its_driver_moves_it_by_what_the_corpus_shows():
    """The driver caveat's ranges are the corpus' own same-machine pairs: one A770's Linux (Mesa) decodes against its
    Windows ones on one build (PR #19988), one Arc Pro B70's Vulkan (Mesa) decodes against its SYCL ones. An Intel
    card's Vulkan decode carries it; its SYCL decode, its prompt and a Radeon's Vulkan decode do not."""
    from core.speed.groups import INTEL_VULKAN_DRIVER_RANGES
    from tests.bench.fit_corpus import corpus_lines

    def pairs(source: str, mine, theirs) -> list[float]:
        rows = [r for r in corpus_lines() if r["source_id"] == source and r["kind"] == "decode"]
        by_model = {r["model"]: r for r in rows if theirs(r)}
        return [r["tok_s"] / by_model[r["model"]]["tok_s"] for r in rows if mine(r) and r["model"] in by_model]

    windows = pairs("llamacpp-pr-19988-a770-linux-windows", lambda r: "Linux run" in r["notes"],
                    lambda r: "Windows run" in r["notes"])  # fmt: skip
    sycl = pairs("wesleyjg-arc-pro-b70", lambda r: r["backend"] == "vulkan", lambda r: r["backend"] == "sycl")
    assert len(windows) == 3 and len(sycl) >= 10
    for got, key in ((windows, "windows"), (sycl, "sycl")):
        assert (round(min(got), 2), round(max(got), 2)) == INTEL_VULKAN_DRIVER_RANGES[key]

    setup = Setup(load_model("Qwen/Qwen3-8B"), configured("llama.cpp"), card_named("Intel Arc B580 12GB"),
                  weights="q4_k_m")  # fmt: skip
    vulkan = predict(setup, Hardware(60.0, 8, backend="vulkan"), 8192)
    assert "Mesa driver" in vulkan.decode_error.caveat and "driver" not in vulkan.prefill_error.caveat
    assert "driver" not in predict(setup, Hardware(60.0, 8, backend="sycl"), 8192).decode_error.caveat
    radeon = replace(setup, card=card_named("Radeon RX 7900 XTX 24GB"))
    assert "driver" not in predict(radeon, Hardware(60.0, 8, backend="vulkan"), 8192).decode_error.caveat
