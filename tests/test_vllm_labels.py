"""`python -m core size --engine vllm` summarised Falcon-H1's and Zamba2's layers as `hybrid(full_attention+mamba2)`,
a kind vLLM does not build, above cache lines that split them: vLLM 0.32's falcon_h1.py gives every
FalconH1ParallelHybrid an Attention and a MambaMixer2 of its own, and zamba2.py every layer a MambaMixer2 and each
hybrid layer its own Attention (dpa_list), each with its own cache spec. The summary now counts those layers, as the
cache lines do; llama.cpp, whose llama_memory_hybrid keeps both caches for one layer, still reads hybrid."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.test_cli import run_cli
from tests.tiny_configs import tiny_raw

FALCON_H1 = "tiiuae/Falcon-H1-7B-Instruct"


def size(model: str, *engine: str) -> dict:
    proc = run_cli("size", model, "--json", "--context", "4k", *engine)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def summary_line(model: str, *engine: str) -> str:
    proc = run_cli("size", model, "--context", "4k", *engine)
    assert proc.returncode == 0, proc.stderr
    return next(line for line in proc.stdout.splitlines() if line.startswith("layers: "))


@pytest.fixture(scope="module")
def zamba2(tmp_path_factory) -> tuple[str, dict]:
    raw = tiny_raw("zamba2")
    path = tmp_path_factory.mktemp("zamba2") / "config.json"
    path.write_text(json.dumps(raw))
    return str(path), raw


def cache_lines(out: dict) -> dict[str, int]:
    return {line["kind"]: line["layers"] for line in out["kinds"]}


def falcon_layers() -> int:
    """Falcon-H1's decoder layers, read from its bundled config."""
    return json.loads((ROOT / "core/model/presets/tiiuae__Falcon-H1-7B-Instruct.json").read_text())["num_hidden_layers"]


def test_falcon_h1_on_vllm_is_one_attention_and_one_mamba2_layer_per_decoder_layer():
    layers = falcon_layers()
    out = size(FALCON_H1, "--engine", "vllm")
    assert out["layers"] == {"full_attention": layers, "mamba2": layers} == cache_lines(out)
    assert summary_line(FALCON_H1, "--engine", "vllm") == f"layers: {layers}× full_attention, {layers}× mamba2"


def test_zamba2_on_vllm_is_a_mamba2_layer_each_and_an_attention_per_hybrid_layer(zamba2):
    path, raw = zamba2
    kinds = raw["layers_block_type"]
    out = size(path, "--engine", "vllm")
    assert out["layers"] == {"mamba2": len(kinds), "full_attention": kinds.count("hybrid")} == cache_lines(out)
    assert "hybrid" not in summary_line(path, "--engine", "vllm")


def test_llama_cpp_still_reads_one_hybrid_layer():
    """llama.cpp's hybrid memory holds the attention and the recurrent cache of one layer: its summary is unchanged."""
    assert size(FALCON_H1, "--engine", "llama.cpp")["layers"] == {"hybrid(full_attention+mamba2)": falcon_layers()}
