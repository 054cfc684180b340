"""Speed in the app: the context table's tok/s columns, the speed explanation, the curves with published points;
and the published figures as data, each traceable to its seed text."""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.speed.efficiency import efficiency_for
from core.speed.published import published
from tests.test_app import app, opened

A100_VLLM = {"card": "A100 80GB PCIe", "engine": "vllm", "weights": "bf16"}


@pytest.fixture(scope="module")
def fit_page():
    return app(A100_VLLM)


def test_context_table_has_decode_and_aggregate_columns(fit_page):
    assert not fit_page.exception
    table = fit_page.dataframe[0].value
    fits = table[table["fits"]]
    decode = list(fits["decode tok/s"])
    assert decode and all(a >= b for a, b in pairwise(decode))  # more context never decodes faster
    # with more than one request at once the batch produces more tokens in all than one sequence does
    many = fits[fits["requests"] >= 2]
    assert (many["aggregate tok/s"] > many["decode tok/s"]).all()
    assert table[~table["fits"]]["decode tok/s"].isna().all()


def test_speed_explanation_names_every_term_and_efficiency(fit_page):
    expander = next(e for e in opened(fit_page, "kv_how_speed").expander if e.label == "How is the speed computed?")
    text = "\n".join(m.value for m in expander.markdown)
    for term in (
        "Decode step",
        "Prefill",
        "time to first token",
        "Efficiencies used",
        "tok/s",
        "1,935,000,000,000 B/s",
    ):
        assert term in text
    # vLLM on a GPU runs on constants fitted to its published runs, and its error is their cross-check
    assert "vllm on gpu — fitted" in text and "cross-checked decode runs of vllm CUDA on datacenter cards" in text


def test_custom_card_says_why_there_is_no_speed():
    at = app({"card": "custom", "gib": "24"})
    assert "decode tok/s" not in at.dataframe[0].value.columns
    assert any("no bandwidth or peak figure" in c.value for c in at.caption)


def test_a_pascal_card_under_vllm_says_why_it_has_no_speed_on_both_pages():
    """A P40 is timed under llama.cpp only (vLLM needs compute capability 7.0): no traceback, the reason instead."""
    at = app({"card": "Tesla P40 24GB", "engine": "vllm", "weights": "bf16"})
    assert not at.exception and "decode tok/s" not in at.dataframe[0].value.columns
    assert any("vLLM needs compute capability 7.0 or newer" in i.value for i in at.info)  # memory: said, not hidden
    assert any("No speed: Tesla P40 24GB has no FP16 or BF16 matrix units" in c.value for c in at.caption)
    at.switch_page("pages/1_hybrid_vs_dense.py").run()
    assert not at.exception
    assert any(c.value.startswith("No speed: Tesla P40 24GB has no FP16") for c in at.caption)
    llamacpp = app({"card": "Tesla P40 24GB", "engine": "llama.cpp", "weights": "q4_k_m"})
    assert not llamacpp.exception and "decode tok/s" in llamacpp.dataframe[0].value.columns


def test_hybrid_page_draws_speed_curves_with_published_points():
    at = app(A100_VLLM | {"cmp": "Qwen/Qwen3-8B"})
    at.switch_page("pages/1_hybrid_vs_dense.py").run()
    assert not at.exception
    assert "Speed on A100 80GB PCIe" in [s.value for s in at.subheader]
    decode = json.loads(at.get("plotly_chart")[-2].proto.spec)
    marks = [d for d in decode["data"] if d["name"].startswith("published")]
    assert sorted(m["y"][0] for m in marks) == [56.3, 63.4, 69.7, 93.9]


def test_published_figures_come_from_their_seed_and_carry_a_prediction():
    rows = published()
    assert len(rows) == 10
    for r in rows:
        seed = Path(r["source"]["seed"])
        if seed.exists():  # the seed texts live outside the repository
            text = seed.read_text()
            value = f"{r['value']:,.1f}".rstrip("0").rstrip(".") if r["value"] < 1000 else f"{r['value']:,.0f}"
            assert value in text or f"~{value}" in text, (value, seed)
        assert r["verified"] is False and r["caveat"]
        assert r["kvscope"]["predicted"] > 0
        assert r["kvscope"]["error"] == pytest.approx(r["kvscope"]["predicted"] / r["value"] - 1, abs=5e-3)
    flagged = [r for r in rows if r["setup"]["engine"] == "vllm" and "inconsistent" in r.get("flag", "")]
    assert {(r["model"], r["context"]) for r in flagged} == {("Qwen/Qwen3.5-9B", 32768), ("Qwen/Qwen3-8B", 32768)}


@pytest.mark.parametrize(
    ("engine", "card", "ngl"), [("vllm", "A100 80GB PCIe", None), ("llama.cpp", "RTX 4060 8GB", 24)]
)
def test_every_speed_formula_evaluates_to_the_number_beside_it(engine, card, ngl):
    from core.engines import configured
    from core.fit import Setup
    from core.memory.gpus import card_named
    from core.model.loading import load_model
    from core.speed import Hardware, predict
    from core.speed.report import speed_lines
    from tests.test_app_formulas import check_line, evaluate, formulas

    setup = Setup(load_model("Qwen/Qwen3.5-9B"), configured(engine), card_named(card), weights="bf16", gpu_layers=ngl)
    lines = speed_lines(predict(setup, Hardware(ram_gb_s=60.0, threads=8), 32768, batch=2))
    assert sum(check_line(line) for line in lines) >= (14 if ngl else 10)
    for line in lines:  # tighter than check_line's half a unit: seconds are small numbers
        for left, printed in formulas(line):
            got, want = evaluate(left)[0], evaluate(printed)[0]
            assert got == pytest.approx(want, rel=2e-3, abs=2e-6), (line, got, want)


def test_the_routed_experts_share_of_the_bandwidth_is_in_the_formula():
    """A MoE on Strix Halo (ROCm) whose experts stream at a share of the bandwidth (the 2025 builds fitted 0.63;
    the current ones fit 1, so the share is set here): the formula names it, and the printed sum still adds up."""
    from dataclasses import replace

    from core.engines import configured
    from core.fit import Setup
    from core.memory.gpus import card_named
    from core.model.loading import load_model
    from core.speed import Hardware, predict
    from core.speed.efficiency import efficiency_for
    from core.speed.report import speed_lines
    from tests.test_app_formulas import evaluate, formulas

    card = card_named("AMD Ryzen AI Max+ 395 (Strix Halo, Radeon 8060S) 128GB")
    setup = Setup(load_model("Qwen/Qwen3-30B-A3B"), configured("llama.cpp"), card, weights="q4_k_m")
    share = replace(efficiency_for("llama.cpp", "gpu", "rocm", "apu"), expert_bandwidth=0.63)
    speed = predict(setup, Hardware(ram_gb_s=60.0, threads=8), 8192, table={("llama.cpp", "gpu"): share})
    assert speed.decode.parts[0].efficiency.expert_bandwidth == 0.63
    lines = speed_lines(speed)
    assert any("B of routed experts ÷" in line for line in lines)
    for line in lines:
        for left, printed in formulas(line):
            got, want = evaluate(left)[0], evaluate(printed)[0]
            assert got == pytest.approx(want, rel=2e-3, abs=2e-6), (line, got, want)


def test_speed_columns_follow_a_new_context_on_the_same_setup():
    """The speed rows are cached per setup and per set of contexts: a context outside the table must not reuse the
    rows cached for the table alone (KeyError '64,000' before)."""
    from tests.test_app import app

    at = app({"model": "meta-llama/Llama-3.1-8B-Instruct", "card": "H100 80GB SXM5"})
    assert not at.exception
    at.text_input(key="in_ctx_text").input("64,000").run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    row = table[table["context"] == "64,000"]
    assert len(row) == 1 and float(row["decode tok/s"].iloc[0]) > 0


def test_the_visitors_cpu_isa_sets_the_prefill_of_layers_in_ram_and_the_formula_says_so():
    """Layers left in RAM: the sidebar's CPU vector ISA (the visitor's CPU, not the server's) picks the quantised
    kernels' prefill factor fitted on that ISA's CPUs; not known, the pooled one. Passes of 24 tokens: from 32 on,
    llama.cpp runs those layers' matmuls on the GPU (op offload) and the CPU's rate no longer enters; a fast RAM
    (100 GB/s) keeps the CPU's matmuls, not its reads, the slower side."""
    at = app({"model": "Qwen/Qwen3-8B", "card": "GeForce RTX 4060 8GB", "engine": "llama.cpp", "weights": "q4_k_m",
              "ngl": "20", "ctx": "8k", "ub": "24", "ram": "100"})  # fmt: skip
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="in_isa").value == ""  # not known until the visitor says

    def prefill_and_formula(page: AppTest) -> tuple[float, str]:
        expander = next(e for e in opened(page, "kv_how_speed").expander if e.label == "How is the speed computed?")
        text = "\n".join(m.value for m in expander.markdown)
        (rate,) = re.findall(r"[\d,]+ tokens ÷ [\d.]+ s = ([\d,.]+) tok/s", text)  # the prefill's own line
        return float(rate.replace(",", "")), text

    pooled, text = prefill_and_formula(at)
    assert "pooled over the CPUs fitted (the CPU's vector ISA not known)" in text
    at.selectbox(key="in_isa").set_value("avx512").run()
    avx512, text = prefill_and_formula(at)
    factor = efficiency_for("llama.cpp", "cpu").family_factor("k-quant", True, "avx512")  # the fitted one, not pooled
    assert f"k-quant kernels at {factor:.3g}× the float kernels' rate, as fitted on AVX-512 CPUs" in text
    assert avx512 > 1.2 * pooled  # the 16 layers in RAM prefill faster
    at.selectbox(key="in_isa").set_value("avx2").run()
    avx2, text = prefill_and_formula(at)
    assert avx2 < pooled and "as fitted on AVX2 CPUs" in text


def test_the_ggml_backend_picks_the_speed_group_and_travels_in_the_link():
    """llama.cpp users pick their ggml backend (an AMD card runs ROCm or Vulkan): the speed and its error bar follow
    the choice, as core.speed times it; a backend that cannot drive the card says so and keeps the card's own."""
    from core.engines import configured
    from core.fit import Setup
    from core.memory.gpus import card_named
    from core.model.loading import load_model
    from core.speed import Hardware, predict
    from tests.test_app import open_page

    params = {"model": "Qwen/Qwen3-8B", "card": "Radeon RX 7900 XTX 24GB", "engine": "llama.cpp",
              "weights": "q4_k_m", "ctx": "8k"}  # fmt: skip
    at = app(params)
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="in_backend").value == "auto"

    def shown(page) -> tuple[float, str]:
        table = page.dataframe[0].value
        decode = float(table[table["context"] == "8K"]["decode tok/s"].iloc[0])
        return decode, " ".join(c.value for c in page.caption if "Decode error bar" in c.value)

    rocm, bar = shown(at)
    assert "ROCm on consumer cards" in bar
    at.selectbox(key="in_backend").set_value("vulkan").run()
    assert not at.exception and at.query_params["backend"] == "vulkan"
    vulkan, bar = shown(at)
    assert "Vulkan on cards with cooperative-matrix cores" in bar
    setup = Setup(load_model("Qwen/Qwen3-8B"), configured("llama.cpp"), card_named("Radeon RX 7900 XTX 24GB"),
                  weights="q4_k_m")  # fmt: skip
    for backend, got in (("rocm", rocm), ("vulkan", vulkan)):
        want = predict(setup, Hardware(60.0, 8, backend=backend), 8192).decode_tok_s
        assert got == pytest.approx(want, rel=0.01), backend
    assert rocm != vulkan

    cuda = app({**params, "backend": "cuda"})  # a link naming a backend the card cannot run
    assert not cuda.exception
    warned = " ".join(w.value for w in cuda.warning)
    assert "CUDA does not run on Radeon RX 7900 XTX 24GB" in warned and "timed on ROCm instead" in warned
    assert shown(cuda)[0] == rocm
    hybrid = open_page("pages/1_hybrid_vs_dense.py", {**params, "backend": "cuda"})
    assert any("timed on ROCm instead" in w.value for w in hybrid.warning)
    other = app({**params, "engine": "vllm", "weights": "bf16", "backend": "vulkan"})
    assert not other.exception and "in_backend" not in [s.key for s in other.selectbox]  # llama.cpp's choice only


def test_the_hybrid_pages_speed_charts_carry_each_models_decode_and_prefill_error_bars():
    """Both charts (decode tok/s and time to first token) carry an error bar, per model: a hybrid's and a dense
    comparator's groups differ."""
    from tests.test_app import open_page

    page = open_page("pages/1_hybrid_vs_dense.py", {"model": "Qwen/Qwen3.5-9B", "card": "GeForce RTX 4090 24GB"})
    assert not page.exception, [e.value for e in page.exception]
    (bars,) = [c.value for c in page.caption if c.value.startswith("Error bars at the longest context drawn")]
    for name in ("Qwen/Qwen3.5-9B", "Qwen/Qwen3-8B"):
        assert f"**{name}**: decode ±" in bars or f"**{name}**: decode not checked" in bars, bars
    assert bars.count("time to first token ") >= 2, bars


def test_vllm_on_an_apple_gpu_is_not_timed_and_its_bytes_say_what_they_are():
    """Upstream vLLM runs on Apple silicon's CPU; its GPU only through the vllm-metal plugin (MLX), which kvscope
    does not model: no speed, and fit says the bytes are vLLM's CUDA layout."""
    from core.engines import configured
    from core.fit import Setup, fit
    from core.memory.gpus import card_named
    from core.model.loading import load_model
    from core.speed import untimed

    setup = Setup(load_model("Qwen/Qwen3-8B"), configured("vllm"), card_named("Apple M3 Max 36GB"))
    assert "vllm-metal plugin" in (untimed(setup) or "")
    assert any("vllm-metal plugin" in note for note in fit(setup, [4096]).notes)
    llama = Setup(setup.model, configured("llama.cpp"), setup.card)
    assert untimed(llama) is None and not any("vllm-metal" in note for note in fit(llama, [4096]).notes)
