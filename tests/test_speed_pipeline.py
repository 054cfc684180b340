"""llama.cpp's pipeline parallelism over its layer split (core.speed.predict.Pipeline): a prompt's passes overlap
across the GPUs. Worked by hand here, and set against published multi-GPU llama-bench runs."""

from __future__ import annotations

import importlib
import re
import statistics

import pytest

from core.engines import configured
from core.fit import Setup
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.speed import Hardware, predict
from core.speed.report import speed_lines

HOST = Hardware(50.0, 8)
CARD = "GeForce RTX 4090 24GB"


def setup(gpus: int, **options) -> Setup:
    model = load_model("meta-llama/Llama-3.1-8B-Instruct")
    return Setup(model, configured("llama.cpp", **options), card_named(CARD), gpus=gpus, weights="q4_k_m")


def test_each_pass_after_the_first_costs_the_busiest_gpus_share_or_the_cpus_overhead():
    """Llama 3.1 8B (32 layers) on 4 GPUs: llama.cpp's split gives the 33 slots (the output layer last) 9, 8, 8 and 8
    layers + output, so the busiest GPU holds 9 of 32 layers. An 8K prompt runs 16 passes of 512 tokens; every pass
    after the first costs 9/32 of a pass's device time, or the pass's overhead (the CPU builds and launches every
    GPU's kernels) where that is longer."""
    prefill = predict(setup(4), HOST, 8192).prefill
    line = prefill.pipeline
    assert line is not None and (line.gpus, line.busiest, line.layers) == (4, 9, 32)
    assert prefill.passes == 16
    apart = prefill.seconds + prefill.pipelined_s  # the passes one after another
    device, overhead = (apart - prefill.overhead_s) / 16, prefill.overhead_s / 16
    step = max(9 / 32 * device, overhead)
    assert prefill.seconds == pytest.approx(device + overhead + 15 * step, rel=1e-9)
    # one GPU times the same passes one after another, with no hop between GPUs
    one = predict(setup(1), HOST, 8192).prefill
    assert one.pipeline is None and one.pipelined_s == 0.0
    assert sum(p.seconds for p in one.parts) == pytest.approx(apart - prefill.overhead_s, rel=1e-9)
    assert 2.0 < one.seconds / prefill.seconds < 32 / 9


def test_no_overlap_without_a_second_pass_or_without_the_pipeline():
    """One pass (the prompt within n_ubatch) has nothing to overlap; a decode step is one pass; layers left in RAM
    (-ngl) or experts in RAM turn llama.cpp's pipeline off (Offload.pipelines); vLLM is not llama.cpp."""
    short = predict(setup(4), HOST, 512)
    assert short.prefill.passes == 1 and short.prefill.pipelined_s == 0.0
    assert short.decode.pipeline is None and short.decode.pipelined_s == 0.0
    partial = setup(4)
    partial = Setup(partial.model, partial.engine, partial.card, gpus=4, weights="q4_k_m", gpu_layers=20)
    assert predict(partial, HOST, 8192).prefill.pipeline is None
    vllm = Setup(partial.model, configured("vllm"), card_named(CARD), gpus=4, tp=4, weights="awq")
    assert predict(vllm, HOST, 8192).prefill.pipeline is None


def test_the_explanation_works_the_saving_out_as_printed():
    """The speed explanation's pipeline line evaluates to the saving the figure took off."""
    speed = predict(setup(2), HOST, 4096)
    line = next(x for x in speed_lines(speed) if x.startswith("- pipelined over 2 GPUs"))
    n = speed.prefill.passes
    numbers = [float(x.replace(",", "")) for x in re.findall(r"(\d[\d,]*\.?\d*) s\b", line)]
    device, overhead, step, device2, overhead2, step2, saved = numbers
    assert (device, overhead, step) == (device2, overhead2, step2)
    assert step == pytest.approx(max(17 / 32 * device / n, overhead / n), abs=2e-6)
    assert saved == pytest.approx((n - 1) * ((device + overhead) / n - step), abs=1e-5)
    assert saved == pytest.approx(speed.prefill.pipelined_s, abs=1e-5)


def test_published_multi_gpu_prompts_read_closer_pipelined_than_one_gpu_after_another(monkeypatch):
    """XiongjieDai's llama.cpp prompts over 2-8 consumer and workstation cards (and PR #6017's 8 A100s): every one is
    held out (fit_corpus Row.held_out: nothing of the pipeline is fitted). Timed one GPU after another, as kvscope did
    before, they read 0.66x of measured (typical) with 2 of 25 within a fifth; pipelined, within about a fifth. (The
    corpus' Vulkan prompts over two Radeons, kyuz0's R9700s, read 1.4-5.2x fast pipelined, the most at depth, where
    that class's attention is not fitted; they are not these CUDA runs.)"""
    from tests.bench import fit_corpus

    rows = [
        r for r in fit_corpus.load_rows()[0]
        if r.kind == "prefill" and r.raw.get("n_devices", 1) > 1 and r.backend == "cuda"
    ]  # fmt: skip
    assert len(rows) >= 20 and all(r.held_out for r in rows)
    dense = [r for r in rows if not fit_corpus.path_of(r) or fit_corpus.path_of(r) == "split-prompt"]

    def errors() -> tuple[float, float]:
        ratios = [x for _, x in fit_corpus.ratios(dense)]
        return statistics.median(abs(x - 1) for x in ratios), statistics.median(ratios)

    pipelined, ratio = errors()
    assert pipelined < 0.22 and 0.9 < ratio < 1.2
    monkeypatch.setattr(importlib.import_module("core.speed.predict"), "pipeline", lambda setup, hw: None)
    one_after_another, slow = errors()
    assert one_after_another > 0.3 and slow < 0.75


def test_a_multi_gpu_prompt_carries_its_paths_error_or_says_it_is_unchecked():
    """A dense model's prompt on 4 consumer CUDA cards carries the held-out error of the multi-GPU prompts of its
    group; on ROCm consumer cards, where no held-out prompt ran on several GPUs, the group's own with a caveat."""
    bar = predict(setup(4), HOST, 8192).prefill_error
    assert bar.checked and "for prompts over several GPUs" in bar.label and "×" in bar.caveat
    rocm = setup(2)
    rocm = Setup(rocm.model, rocm.engine, card_named("Radeon RX 7900 XTX 24GB"), gpus=2, weights="q4_k_m")
    other = predict(rocm, HOST, 8192).prefill_error
    assert "for prompts over several GPUs" not in other.label
    assert "no held-out prompt among them ran on several GPUs" in other.caveat


def test_fit_a_card_works_the_pipeline_out_for_llamacpp_over_several_gpus():
    """The app's speed explanation for Llama 3.1 8B on 4 RTX 4090s under llama.cpp at 8K shows the pipeline line,
    with the saving core.speed.predict takes off; the prefill figure shown is the pipelined one."""
    from tests.test_app import app, opened

    at = app({"model": "meta-llama/Llama-3.1-8B-Instruct", "engine": "llama.cpp", "card": CARD, "gpus": "4",
              "weights": "q4_k_m", "ctx": "8k"})  # fmt: skip
    assert not at.exception, [e.value for e in at.exception]
    expander = next(e for e in opened(at, "kv_how_speed").expander if e.label == "How is the speed computed?")
    text = "\n".join(m.value for m in expander.markdown)
    assert "- pipelined over 4 GPUs (llama.cpp's layer split)" in text
    prefill = predict(setup(4), HOST, 8192).prefill
    assert f"= {prefill.pipelined_s:.6f} s" in text


def test_the_command_lines_json_says_what_the_pipeline_saves(capsys):
    """`python -m core speed --json` carries each row's prefill_pipelined_s: predict's saving over 4 GPUs, 0 on one."""
    import json

    from core.cli import main

    def rows(gpus: int) -> list[dict]:
        main(["speed", "meta-llama/Llama-3.1-8B-Instruct", "--engine", "llama.cpp", "--gpu", CARD, "--gpus",
              str(gpus), "--weights", "q4_k_m", "--context", "8k", "--json"])  # fmt: skip
        return json.loads(capsys.readouterr().out)["rows"]

    (four,) = rows(4)
    assert four["prefill_pipelined_s"] == pytest.approx(predict(setup(4), HOST, 8192).prefill.pipelined_s, rel=1e-9)
    assert four["prefill_pipelined_s"] > 0 and rows(1)[0]["prefill_pipelined_s"] == 0.0
