"""`python -m core fit` says when the weight format asked for is not what the engine loads, or quantises nothing of
the model; and gpt-oss's GGUFs keep their MXFP4 experts (core.memory.quant._gguf_type), which fit says too."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from core.engines import configured
from core.fit import Setup, fit
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.model.params import count_params
from core.report import engine_format_warning
from tests.test_cli import run_cli


def fit_json(*args: str) -> dict:
    proc = run_cli("fit", *args, "--gpu", "RTX 3060", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(
    ("model", "engine", "weights", "says"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "vllm", "mxfp4", "has none: every weight stays 16-bit"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama.cpp", "MXFP4_MOE", "has none: every weight stays Q8_0"),
        ("Qwen/Qwen3-30B-A3B", "llama.cpp", "mxfp4", "its type for MXFP4 experts is mxfp4_moe"),
        # a dense model first hears that it has no experts for MXFP4 to quantise (it said: "use mxfp4_moe")
        ("Qwen/Qwen3-8B", "llama.cpp", "mxfp4", "has none: every weight stays 16-bit"),
        ("Qwen/Qwen3-8B", "llama.cpp", "awq", "awq checkpoints need converting first"),
        ("Qwen/Qwen3-8B", "transformers", "Q4_K_M", "transformers dequantises GGUF (q4_k_m)"),  # as typed
    ],
)
def test_fit_notes_a_format_the_engine_does_not_load_or_the_model_does_not_use(model, engine, weights, says):
    notes = fit_json(model, "--engine", engine, "--weights", weights)["notes"]
    assert any(says in note for note in notes), notes


def test_a_format_that_suits_the_engine_and_model_brings_no_warning():
    notes = fit_json("openai/gpt-oss-20b", "--engine", "vllm", "--weights", "mxfp4")["notes"]
    assert not any("quantises only routed experts" in note for note in notes)
    assert engine_format_warning(configured("llama.cpp"), "Q4_K_M", load_model("Qwen/Qwen3-8B")) is None


def test_gpt_oss_weights_as_a_gguf_keep_the_experts_mxfp4_and_say_so():
    """The experts are most of gpt-oss's bytes: in F16 they stay MXFP4, so the file is 4.25 bits a weight there, not
    16 (tests/test_speed_groups.py checks the sizes against llama-bench's files, tests/engines against llama.cpp)."""
    experts = count_params(load_model("openai/gpt-oss-20b")).experts
    f16 = fit_json("openai/gpt-oss-20b", "--engine", "llama.cpp", "--weights", "F16", "--context", "4k")
    moe = fit_json("openai/gpt-oss-20b", "--engine", "llama.cpp", "--weights", "MXFP4_MOE", "--context", "4k")
    assert any("routed experts stay MXFP4 in every GGUF type" in note for note in f16["notes"])
    assert not any("routed experts stay MXFP4" in note for note in moe["notes"])  # that type makes them so itself
    widened = experts * (2 - 17 / 32)  # bytes the experts would add at 16 bits instead of MXFP4's 17 per 32
    assert 0 < f16["weights_bytes"] - moe["weights_bytes"] < widened / 4


def test_transformers_sizes_a_gguf_type_as_the_checkpoint_it_dequantises_to():
    """transformers dequantises GGUF weights when it loads them: a q4_k_m asked for is sized as the checkpoint's
    bf16 (the warning says so), where the verdict said "Fits" on q4_k_m's 7.92 GiB a GPU beside that warning."""
    model, engine = load_model("meta-llama/Llama-3.1-70B-Instruct"), configured("transformers")
    setup = Setup(model=model, engine=engine, card=card_named("A100 80GB"), gpus=5, pp=5, weights="q4_k_m")
    asked, bf16 = fit(setup, [4096]), fit(replace(setup, weights="bf16"), [4096])
    assert asked.weights_format == "bf16" and asked.rows[0].weights_bytes == bf16.rows[0].weights_bytes
    assert "sized here as the checkpoint's bf16" in engine_format_warning(engine, "q4_k_m", model)


def test_a_checkpoint_llama_cpp_cannot_load_is_sized_as_its_converters_gguf():
    """No --weights: DeepSeek-V3's own fp8_block is no GGUF. llama.cpp's converter dequantizes it to its default
    --outtype (conversion/base.py dequant_model), so fit and the finders size that bf16 GGUF and say so; asked for
    fp8_block by name, fit still says it needs converting."""
    args = ("deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--gpus", "8", "--engine", "llama.cpp", "--context", "8k")
    out = fit_json(*args)
    assert out["weights"] == "gguf_bf16"
    assert any(
        "the fp8_block checkpoint is sized as the gguf_bf16 GGUF its converter writes" in n for n in out["notes"]
    )
    asked = fit_json(*args, "--weights", "fp8_block")
    assert any("fp8_block checkpoints need converting first" in n for n in asked["notes"])
    speed = json.loads(run_cli("speed", *args, "--weights", "fp8_block", "--json").stdout)
    assert any("fp8_block checkpoints need converting first" in n for n in speed["notes"])


def test_gpt_oss_on_llama_cpp_is_sized_as_the_gguf_its_converter_writes():
    """gpt-oss ships its experts MXFP4 and the rest bf16; llama.cpp's converter keeps the experts and writes the rest
    16-bit, the file llama-bench calls F16: 13,779,630,336 B for gpt-oss-20b in the published runs
    (measurements/speed/corpus), and 12,101,070,356 B for the MXFP4 MoE type (the rest Q8_0)."""
    from core.engines.base import sized_weights
    from core.fit import setup_format

    model = load_model("openai/gpt-oss-20b")
    setup = Setup(model, configured("llama.cpp"), card_named("RTX 4090"))
    assert setup_format(setup) == "gguf_bf16"
    assert sized_weights(count_params(model), "gguf_bf16", 2).total == 13_779_630_336
    moe = sized_weights(count_params(model), "mxfp4_moe", 2).total
    assert abs(moe - 12_101_070_356) / 12_101_070_356 < 0.001
    notes = fit(setup, [8192]).notes
    assert any("routed experts stay MXFP4" in n and "mxfp4_moe keeps them Q8_0" in n for n in notes)


def test_fit_and_speed_say_the_same_of_an_asked_format():
    """One function (core.report.format_note) for both: speed took the format as sized, which on transformers is
    the checkpoint's for a GGUF type, and so missed fit's warning that transformers dequantises it."""
    args = ("Qwen/Qwen3-8B", "--gpu", "H100", "--engine", "transformers", "--weights", "q4_k_m", "--context", "8k")
    fitted = fit_json(*args)["notes"]
    speed = json.loads(run_cli("speed", *args, "--json").stdout)["notes"]
    (said,) = [n for n in fitted if "transformers dequantises GGUF" in n]
    assert said in speed
