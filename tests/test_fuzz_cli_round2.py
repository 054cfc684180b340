"""Hostile input to `python -m core`, second round (issue 17): numbers past any real setting, configs that used to
end in a traceback, damaged weight files, pipes and devices where a file belongs. Every case runs as a real
`python -m core` process and must end in exit status 2 with one line naming the problem, and no traceback; the
cases that used to hang or eat memory also run under a time limit and a 1 GiB address-space cap.

Each case failed on the code before the fix: a traceback, a hang, `Infinity` in --json output, exit 0 with every row
refused, or a run to the memory cap ("out of memory" was the only line).
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.tiny_configs import tiny_raw

CASE_S = 20.0  # one case takes a second or two; a hang is killed here
AS_LIMIT = 1 << 30  # the address space a case may use (the CLI needs about a third of it)
DIGITS_400 = "9" * 400
QWEN = "Qwen/Qwen3-8B"  # a bundled preset, resolved already: no transformers import
LLAMA_CPP = ["--engine", "llama.cpp", "--weights", "q4_k_m"]


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def run_core(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m core ARGV` with no stdin, a time limit and the address-space cap (an allocation past it fails
    with the MemoryError that the old code's runaway reads ended in)."""
    env = os.environ | {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "core", *argv],
        capture_output=True,
        text=True,
        timeout=CASE_S,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        preexec_fn=_cap_memory,
    )


def assert_refused(proc: subprocess.CompletedProcess[str], *names: str) -> str:
    """Exit 2, no traceback, no output, and exactly one `error:` line (argparse prints its usage above it), which
    names each of `names`."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
    assert proc.stdout == ""
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert "out of memory" not in errors[0]
    for name in names:
        assert name.lower() in errors[0].lower(), errors[0]
    return errors[0]


# ---------------------------------------------------------------- numbers on the command line


FLAG_CASES = {
    # item 5: OverflowError from float arithmetic on a 400-digit count
    "fit_kv_cache_memory_bytes_400_digits": (
        ["fit", QWEN, "--gpu", "H100", "--engine", "vllm", "--kv-cache-memory-bytes", DIGITS_400],
        ["--kv-cache-memory-bytes", "24 digits"],
    ),
    "autofit_fit_target_400_digits": (
        ["autofit", QWEN, "--gpu-mem-gib", "8", "--fit-target", DIGITS_400],
        ["--fit-target", "24 digits"],
    ),
    "speed_threads_400_digits": (
        ["speed", QWEN, "--gpu", "RTX 4060 8GB", *LLAMA_CPP, "-ngl", "20", "--threads", DIGITS_400],
        ["--threads"],
    ),
    "speed_batch_400_digits": (["speed", QWEN, "--gpu", "H100", "--batch", DIGITS_400], ["--batch"]),
    # item 5: OLLAMA_GPU_OVERHEAD of 10^24 bytes (24 digits, past units.py's digit check) ran, to 0 layers on GPU
    "ollama_gpu_overhead_10e24": (["ollama", QWEN, "--gpu-overhead", "9" * 24], ["--gpu-overhead", "1 PiB"]),
    # item 5: ZeroDivisionError in the cluster planner on a 0-byte card
    "cluster_card_of_1e-10_gib": (
        ["cluster", QWEN, "--gpu-mem-gib", "1e-10", "--nodes", "1", "--gpus-per-node", "1"],
        ["--gpu-mem-gib", "1 MiB"],
    ),
    # item 7: inf accepted, --json printed Infinity; nan timeout ran the probe with no limit
    "speed_ram_gbs_inf": (["speed", QWEN, "--gpu", "H100", "--ram-gbs", "inf", "--json"], ["--ram-gbs", "finite"]),
    "speed_ram_gbs_1e308": (["speed", QWEN, "--gpu", "H100", "--ram-gbs", "1e308", "--json"], ["--ram-gbs"]),
    # item 8: every card or plan refused, exit 0
    "cluster_kv_dtype_garbage": (["cluster", QWEN, "--gpu", "H100", "--kv-dtype", "garbage_dtype"], ["--kv-dtype"]),
    "cards_kv_dtype_garbage": (["cards", QWEN, "--kv-dtype", "garbage_dtype"], ["--kv-dtype", "garbage_dtype"]),
    "cards_weights_garbage": (["cards", QWEN, "--weights", "garbage_format"], ["weight format", "garbage_format"]),
    # siblings found by trying 400 digits, 0, nan, inf and 1e308 on every number option
    "size_batch_400_digits": (["size", QWEN, "--batch", DIGITS_400], ["--batch"]),
    "fit_max_num_batched_tokens_400_digits": (
        ["fit", QWEN, "--gpu", "H100", "--engine", "vllm", "--max-num-batched-tokens", DIGITS_400],
        ["--max-num-batched-tokens"],
    ),
    "ollama_num_parallel_400_digits": (["ollama", QWEN, "--num-parallel", DIGITS_400], ["--num-parallel"]),
    "ollama_threads_400_digits": (["ollama", QWEN, "--threads", DIGITS_400], ["--threads"]),
    "fit_n_gpu_layers_400_digits": (["fit", QWEN, "--gpu", "H100", *LLAMA_CPP, "-ngl", DIGITS_400], ["-ngl"]),
    "speed_n_cpu_moe_400_digits": (
        ["speed", "Qwen/Qwen3-30B-A3B", "--gpu", "RTX 4090", *LLAMA_CPP, "--n-cpu-moe", DIGITS_400],
        ["--n-cpu-moe"],
    ),
}


@pytest.mark.parametrize("name", sorted(FLAG_CASES))
def test_hostile_flag_values_are_one_error_line(name):
    argv, names = FLAG_CASES[name]
    assert_refused(run_core(*argv), *names)


def test_probe_timeout_nan_is_refused_before_anything_runs(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps(tiny_raw("llama")))
    assert_refused(run_core("probe", str(config), "--timeout", "nan", "--quiet"), "--timeout", "finite")


def test_json_output_is_strict_json_when_a_count_is_unlimited():
    """-ngl 0 keeps the whole cache in RAM, so any number of requests fit the card: that was `Infinity`, which no
    strict JSON reader takes; it is null, as the cards and models records write an unlimited count."""
    proc = run_core("fit", QWEN, "--gpu", "RTX 4060 8GB", *LLAMA_CPP, "-ngl", "0", "--json")
    assert proc.returncode == 0, proc.stderr

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in --json output")

    out = json.loads(proc.stdout, parse_constant=refuse)
    assert all(row["max_concurrency"] is None for row in out["contexts"])


# ---------------------------------------------------------------- configs


def _config(tmp_path: Path, content: dict | str) -> str:
    path = tmp_path / "config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


MAMBA_SSM = {"d_model": 64, "n_layer": 2, "vocab_size": 96}
CONFIG_CASES = {
    # item 5: json.loads raised ValueError "Exceeds the limit (4300 digits)"
    "integer_of_5000_digits": (
        '{"model_type": "llama", "hidden_size": 1' + "0" * 5000 + "}",
        ["size"],
        ["4,300 digits"],
    ),
    # item 5: AttributeError, ZeroDivisionError, TypeError in the mamba_ssm translation
    "mamba_ssm_cfg_list": (MAMBA_SSM | {"ssm_cfg": [1, 2]}, ["size"], ["ssm_cfg"]),
    "mamba_ssm_cfg_string": (MAMBA_SSM | {"ssm_cfg": "Mamba2"}, ["size"], ["ssm_cfg"]),
    "mamba_ssm_headdim_0": (MAMBA_SSM | {"ssm_cfg": {"layer": "Mamba2", "headdim": 0}}, ["size"], ["headdim"]),
    "mamba_ssm_d_model_string": (
        MAMBA_SSM | {"d_model": "64", "ssm_cfg": {"layer": "Mamba2"}},
        ["size"],
        ["d_model"],
    ),
    # item 5: a 1e300 width multiplier ran to an OverflowError (or an absurd answer) in speed
    "lfm2_ffn_multiplier_1e300": (
        tiny_raw("lfm2") | {"block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1e300},
        ["speed", "--gpu", "H100"],
        ["block_ffn_dim_multiplier"],
    ),
    # item 7: 200 of 128 experts per token was sized
    "moe_more_active_experts_than_experts": (
        tiny_raw("qwen3_5_moe_text") | {"num_experts": 128, "num_experts_per_tok": 200},
        ["fit", "--gpu", "H100"],
        ["num_experts_per_tok", "128"],
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIG_CASES))
def test_hostile_configs_are_one_error_line(tmp_path, name):
    content, (command, *flags), names = CONFIG_CASES[name]
    assert_refused(run_core(command, _config(tmp_path, content), *flags), *names)


# ---------------------------------------------------------------- weight files


def _safetensors(tmp_path: Path, header: bytes, data: int = 0) -> str:
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * data)
    return str(path)


def _tensor(offsets: str) -> bytes:
    return ('{"model.layers.0.w": {"dtype": "F16", "shape": [2], "data_offsets": ' + offsets + "}}").encode()


SAFETENSORS_CASES = {
    # item 5: AttributeError, KeyError, TypeError, ValueError (4,300 digits)
    "header_is_a_list": (b"[1, 2]", "not an object"),
    "no_data_offsets": (b'{"w": {"dtype": "F16", "shape": [2]}}', "data_offsets"),
    "string_offsets": (_tensor('["0", "4"]'), "data_offsets"),
    "offset_of_5000_digits": (_tensor("[0, 1" + "0" * 5000 + "]"), "digits"),
    # item 7: negative sizes gave negative weights and a 10^21 GiB budget; Infinity gave NaN weights
    "negative_size": (_tensor("[1000000000000000000000, 0]"), "data_offsets"),
    "infinity_offset": (_tensor("[0, Infinity]"), "data_offsets"),
    "offsets_past_the_data": (_tensor("[0, 1000000]"), "data_offsets"),
}


@pytest.mark.parametrize("name", sorted(SAFETENSORS_CASES))
def test_damaged_safetensors_are_one_error_line(tmp_path, name):
    header, phrase = SAFETENSORS_CASES[name]
    path = _safetensors(tmp_path, header, data=4)
    assert_refused(run_core("fit", QWEN, "--gpu-mem-gib", "24", "--weights-file", path), phrase)


def _gguf(tensors: int, keys: int, rest: bytes = b"") -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, tensors, keys) + rest


GGUF_ARRAY = 9
GGUF_CASES = {
    # item 5: IndexError from the gguf reader
    "2^62_tensors": (_gguf(2**62, 0, b"\0" * 64), "tensors"),
    "2^62_keys": (_gguf(0, 2**62, b"\0" * 64), "keys"),
    "key_of_2^60_bytes": (_gguf(0, 1, struct.pack("<Q", 2**60) + b"k" * 64), "key"),
    # item 6: one key holding a 2^40-item uint8 array: 60 bytes that climbed to 1.9 GiB
    "array_of_2^40_items": (
        _gguf(0, 1, struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", GGUF_ARRAY, 0, 2**40) + b"\0" * 11),
        "array",
    ),
    "tensor_past_the_end": (
        _gguf(1, 0, struct.pack("<Q", 10) + b"blk.0.attn" + struct.pack("<IQIQ", 1, 2**50, 0, 0)),
        "past the end",
    ),
}


@pytest.mark.parametrize("name", sorted(GGUF_CASES))
def test_damaged_gguf_is_one_error_line(tmp_path, name):
    content, phrase = GGUF_CASES[name]
    path = tmp_path / "model.gguf"
    path.write_bytes(content)
    assert_refused(run_core("fit", QWEN, "--gpu-mem-gib", "24", *LLAMA_CPP[:2], "--weights-file", str(path)), phrase)


# ---------------------------------------------------------------- pipes and devices (item 6: hangs, memory)


@pytest.mark.parametrize("suffix", [".safetensors", ".gguf"])
def test_a_fifo_as_weights_file_is_refused_without_blocking(tmp_path, suffix):
    fifo = tmp_path / f"model{suffix}"
    os.mkfifo(fifo)  # nothing ever writes to it: opening it for reading blocks forever
    proc = run_core("fit", QWEN, "--gpu-mem-gib", "24", "--weights-file", str(fifo))
    assert_refused(proc, "not a regular file")


def test_resolve_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert_refused(run_core("resolve", str(fifo)), "not a regular file")


def test_resolve_refuses_dev_zero_without_reading_it():
    """It read 1.8 GiB of zeros before the 2 GiB cap; under the 1 GiB cap that was only "out of memory"."""
    assert_refused(run_core("resolve", "/dev/zero"), "/dev/zero", "not a regular file")


@pytest.mark.parametrize("command", ["size", "fit"])
def test_a_fifo_as_the_model_config_is_refused_without_blocking(tmp_path, command):
    """The model argument of every command reads its config.json through the same reader as `resolve`."""
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert_refused(
        run_core(command, str(fifo), *(["--gpu-mem-gib", "24"] if command == "fit" else [])), "not a regular file"
    )
