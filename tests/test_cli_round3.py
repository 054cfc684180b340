"""Command-line answers a third audit found misleading: each asserted against the input that showed it."""

from __future__ import annotations

import json

from core.cli import main
from core.engines.runtimes import default_num_ctx
from core.memory.gpus import card_named


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_autofit_under_ollama_starts_from_the_context_ollama_passes(capsys):
    """Ollama always passes -c num_ctx × np (llm/llama_server.go), num_ctx by VRAM: 32K on a 24 GB card, not the
    model's 128K that llama-server alone would start from."""
    args = ["autofit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "GeForce RTX 4090 24GB"]
    code, out, _ = run(capsys, *args, "--frontend", "ollama", "--json")
    record = json.loads(out)
    assert code == 0 and record["n_ctx"] == default_num_ctx(card_named("RTX 4090").memory_bytes) == 32768
    assert record["steps"][0].startswith("Ollama passes -c 32,768")
    code, out, _ = run(capsys, *args, "--json")  # llama-server on its own: the training context
    assert json.loads(out)["n_ctx"] == 131072  # one unified stream of the training context, for its 4 slots


def test_ollama_rows_name_the_memory_given_and_a_card_once(capsys):
    args = ["ollama", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "GeForce RTX 4060 8GB", "--gpu", "RTX 4060 8GB"]
    code, out, _ = run(capsys, *args, "--gpu", "GeForce RTX 4090 24GB", "--gpu-mem-gib", "48", "--json")
    cards = [row["card"] for row in json.loads(out)["rows"]]
    assert code == 0 and cards == ["GeForce RTX 4060 8GB (48 GiB)", "GeForce RTX 4090 24GB (48 GiB)"]


def test_ollama_refuses_weights_that_are_not_a_gguf(capsys):
    code, _, err = run(capsys, "ollama", "meta-llama/Llama-3.1-8B-Instruct", "--weights", "fp8")
    assert code == 2 and "Ollama runs GGUF files; fp8 is not a GGUF type" in err
    code, _, err = run(capsys, "autofit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4090", "--weights", "awq")
    assert code == 2 and "llama.cpp runs GGUF files; awq is not a GGUF type" in err
    code, out, _ = run(capsys, "ollama", "meta-llama/Llama-3.1-8B-Instruct", "--weights", "bf16", "--json")
    assert code == 0 and json.loads(out)["weights"] == "bf16"  # its BF16 GGUF


def test_cluster_layout_and_expert_parallel_flag_must_agree(capsys):
    base = ["cluster", "moonshotai/Kimi-K2-Instruct", "--gpu", "H200", "--nodes", "2"]
    code, _, err = run(capsys, *base, "--layout", "1,1,16,ep", "--no-expert-parallel")
    assert code == 2 and "ends in 'ep' but --no-expert-parallel is given" in err
    code, _, err = run(capsys, *base, "--layout", "1,1,16", "--expert-parallel")
    assert code == 2 and "has no 'ep' but --expert-parallel is given" in err
    assert run(capsys, *base, "--layout", "1,1,16,ep", "--expert-parallel")[0] == 0


def test_vllm_on_the_cpu_is_timed_on_the_cpu(capsys):
    """`--platform cpu` is vLLM's CPU backend: speed runs it as --device cpu, and its --gpu-mem-gib (the memory `fit`
    sizes the cache in, the README's example) is not a GPU without figures."""
    base = ["speed", "Qwen/Qwen3-8B", "--engine", "vllm", "--context", "4k", "--ram-gbs", "20", "--json"]
    code, out, err = run(capsys, *base, "--platform", "cpu", "--gpu-mem-gib", "64")
    assert code == 0, err
    platform = json.loads(out)
    code, out, _ = run(capsys, *base, "--device", "cpu")
    device = json.loads(out)
    assert platform["device"] == device["device"] == "cpu" and platform["layers_on_gpu"] == 0
    assert platform["rows"][0]["decode_tok_s"] == device["rows"][0]["decode_tok_s"] > 0
    code, _, err = run(capsys, *base, "--platform", "cpu", "--gpu", "RTX 4090")
    assert code == 2 and "runs everything in system RAM" in err


def test_vllm_size_says_how_its_fixed_column_comes_from_the_state(capsys):
    """Falcon-H1 under vLLM printed three state figures nothing connected: the layers' 70,152,192 B, a page per layer
    (kinds) and a fixed column three pages deep. The note gives the pages and the blocks, and they multiply out."""
    import re

    base = ["size", "tiiuae/Falcon-H1-7B-Instruct", "--engine", "vllm", "--context", "32k", "--json"]
    for flag, blocks in (("--prefix-caching", 3), ("--no-prefix-caching", 1)):
        code, out, _ = run(capsys, *base, flag)
        assert code == 0
        record = json.loads(out)
        (note,) = [n for n in record["notes"] if n.startswith("vLLM:")]
        assert f"the layers hold {record['fixed_bytes_per_sequence']:,} B" in note
        shown, pages = re.search(r"the fixed column is (\d+) × ([\d,]+) B", note).groups()
        (mamba,) = [k for k in record["kinds"] if k["kind"] == "mamba2"]
        assert int(pages.replace(",", "")) == mamba["layers"] * mamba["fixed_bytes"]
        assert (
            int(shown) == blocks
            and record["contexts"][0]["fixed_bytes"] == blocks * mamba["layers"] * mamba["fixed_bytes"]
        )


def test_a_model_pages_address_is_its_repo_and_a_preset_with_a_quant_tag_is_pointed_at_weights(capsys):
    """`https://huggingface.co/Qwen/Qwen3-8B` is the model page of a bundled preset, not a GGUF; `Qwen/Qwen3-8B:Q4_K_M`
    is llama.cpp's -hf syntax on a repo with no GGUF, which (offline here) cannot be listed: the error says to give
    the preset and the format."""
    code, out, _ = run(capsys, "size", "https://huggingface.co/Qwen/Qwen3-8B", "--json")
    assert code == 0 and json.loads(out)["model"] == "Qwen/Qwen3-8B"
    code, _, err = run(capsys, "size", "Qwen/Qwen3-8B:Q4_K_M")
    assert (
        code == 2
        and "Qwen/Qwen3-8B itself is a bundled preset: give Qwen/Qwen3-8B and the format as --weights q4_k_m" in err
    )


def test_argument_errors_are_one_line_naming_the_flag():
    """argparse printed its 15-26-line usage before the message; a value starting with '-' read as a missing one."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    for argv, said in (
        (["fit", "Qwen/Qwen3-8B", "--context", "0"], "argument --context: token count must be positive"),
        (["ollama", "Qwen/Qwen3-8B", "--free", "-1GiB"], "is written --free=VALUE"),
    ):
        proc = subprocess.run([sys.executable, "-m", "core", *argv], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr


def test_huge_counts_print_in_full_and_ngl_past_the_layers_is_clamped(capsys):
    from core.units import format_tokens

    assert format_tokens(10_000_000_000) == "10,000,000,000" and format_tokens(8 << 20) == "8M"  # not 9765625K
    assert format_tokens(1 << 40) == "1,099,511,627,776" and format_tokens(131072) == "128K"
    base = ["autofit", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "RTX 4090", "--json"]
    for ngl, shown in (("200", 33), ("0", 0)):
        code, out, _ = run(capsys, *base, "-ngl", ngl)
        assert code == 0 and json.loads(out)["gpu_layers"] == shown  # llama.cpp runs at most its 33 slots


def test_fit_says_what_llama_servers_own_fit_would_start_when_a_row_does_not_fit(capsys):
    """gpt-oss-20b at Q4_K_M on an 8 GB card: every layer on the GPU does not fit, but llama-server started without
    -ngl places the experts of its last layers in RAM and runs; fit says so, as the app does."""
    from core.engines import configured
    from core.fit import Setup
    from core.llamacpp_autofit import autofit_sentence
    from core.model.loading import load_model

    args = ["fit", "openai/gpt-oss-20b", "--gpu", "RTX 4060 8GB", "--engine", "llama.cpp", "--frontend"]
    code, out, _ = run(capsys, *args, "llama-server", "--weights", "q4_k_m", "--context", "4k", "--json")
    record = json.loads(out)
    setup = Setup(load_model("openai/gpt-oss-20b"), configured("llama.cpp", frontend="llama-server"),
                  card_named("RTX 4060 8GB"), weights="q4_k_m")  # fmt: skip
    said = autofit_sentence(setup, "llama-server")
    assert code == 0 and not record["contexts"][0]["fits"] and said in record["notes"] and "in system RAM" in said


def test_vllm_on_the_cpu_takes_no_named_gpu_in_fit_either(capsys):
    code, _, err = run(capsys, "fit", "Qwen/Qwen3-8B", "--engine", "vllm", "--platform", "cpu", "--gpu", "H100")
    assert code == 2 and "--platform cpu is vLLM on the host's CPU" in err


def test_fit_under_the_ollama_front_end_says_what_ollama_itself_does(capsys):
    """As Fit a card does: Ollama leaves -ngl to llama-server's --fit, which runs gpt-oss-20b on 8 GB with experts
    in RAM, while every layer with its experts on the GPU does not fit."""
    args = ["fit", "openai/gpt-oss-20b", "--gpu", "RTX 4060 8GB", "--engine", "llama.cpp", "--frontend", "ollama"]
    code, out, _ = run(capsys, *args, "--weights", "q4_k_m", "--context", "4k", "--json")
    record = json.loads(out)
    (said,) = [n for n in record["notes"] if n.startswith("Ollama would offload")]
    assert code == 0 and not record["contexts"][0]["fits"] and "experts of layers 13–23 in system RAM" in said


def test_a_llama_cpp_build_from_the_future_or_before_llama_cpp_is_refused():
    import pytest

    from core.engines.llamacpp import LlamaCppBuild
    from core.errors import InputError

    with pytest.raises(InputError, match="that date has not come yet"):
        LlamaCppBuild.parse("2999-01-01")
    with pytest.raises(InputError, match="first commit is of 2023-03-10"):
        LlamaCppBuild.parse("2019-05-01")
    assert LlamaCppBuild.parse("2023-03-10").spec == "2023-03-10"
    assert LlamaCppBuild.parse("2025-12-01").spec == "2025-12-01"


def test_a_weights_file_of_another_kind_is_named_as_such(capsys, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not weights\n")
    code, _, err = run(capsys, "fit", "Qwen/Qwen3-8B", "--gpu", "RTX 4090", "--weights-file", str(notes))
    assert code == 2 and "is neither a .gguf nor a .safetensors file" in err  # not a header "of 3e18 bytes"


def test_vllm_on_the_cpu_names_host_memory_not_a_gpu(capsys):
    """vLLM's CPU backend takes --gpu-memory-utilization of the host's memory (v1/worker/cpu_worker.py)."""
    code, out, _ = run(capsys, "fit", "Qwen/Qwen3.5-9B", "--engine", "vllm", "--platform", "cpu", "--gpu-mem-gib", "64")
    first, second = out.splitlines()[:2]
    assert code == 0 and "on 64.00 GiB of host memory (vLLM's CPU backend)" in first and "GPU" not in first
    assert second.startswith("host: usable 58.88 GiB")  # 0.92 of it, as vLLM's CPU worker reserves
