"""Exact weight sizes from real files: safetensors headers, GGUF tensor tables, and their use in a fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from safetensors.torch import save_file

from core.engines import engine_named
from core.engines.llamacpp import Offload
from core.errors import InputError
from core.fit import Setup, fit
from core.memory.gpus import Card
from core.memory.weightfiles import read_weights
from core.model.loading import model_from_config
from tests.tiny_configs import tiny_raw


def write_checkpoint(folder, shards=2):
    tensors = {
        "model.embed_tokens.weight": torch.zeros(96, 64, dtype=torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.zeros(64, 64, dtype=torch.bfloat16),
        "model.layers.1.mlp.down_proj.weight": torch.zeros(64, 96, dtype=torch.float32),
        "model.norm.weight": torch.zeros(64, dtype=torch.bfloat16),
        "lm_head.weight": torch.zeros(96, 64, dtype=torch.float16),
    }
    names = list(tensors)
    for i in range(shards):
        save_file({n: tensors[n] for n in names[i::shards]}, str(folder / f"model-{i:05d}.safetensors"))
    return tensors


def test_safetensors_folder_sizes_are_exact(tmp_path):
    tensors = write_checkpoint(tmp_path)
    weights = read_weights(str(tmp_path))
    assert weights.total_bytes == sum(t.numel() * t.element_size() for t in tensors.values())
    assert dict(weights.layer_bytes) == {0: 64 * 64 * 2, 1: 64 * 96 * 4}
    assert weights.embedding_bytes == 96 * 64 * 2
    assert weights.other_bytes == 64 * 2 + 96 * 64 * 2


def test_gguf_tensor_table_sizes_are_exact(tmp_path):
    path = tmp_path / "tiny.gguf"
    writer = GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((96, 64), dtype=np.float32))
    q8 = np.zeros((64, 64 // 32 * 34), dtype=np.uint8)  # Q8_0: 34 bytes per 32 weights, stored as raw bytes
    writer.add_tensor("blk.0.attn_q.weight", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    writer.add_tensor("blk.1.ffn_down.weight", np.zeros((64, 96), dtype=np.float16))
    writer.add_tensor("output.weight", np.zeros((96, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    weights = read_weights(str(path))
    assert dict(weights.layer_bytes) == {0: 64 * 2 * 34, 1: 64 * 96 * 2}
    assert weights.embedding_bytes == 96 * 64 * 4
    assert weights.other_bytes == 96 * 64 * 2
    # llama.cpp's -ngl takes the last slots of [layer 0, layer 1, output]: -ngl 1 is the output layer alone, -ngl 2
    # adds layer 1, -ngl 3 everything but the embedding
    on_gpu = [weights.bytes_on_gpu(o.layers, o.output) for o in (Offload.of(n, 2) for n in (0, 1, 2, 3))]
    assert on_gpu == [0, 96 * 64 * 2, 64 * 96 * 2 + 96 * 64 * 2, 64 * 2 * 34 + 64 * 96 * 2 + 96 * 64 * 2]


def test_a_tied_gguf_puts_a_copy_of_the_embedding_on_the_gpu_as_its_head(tmp_path):
    """No output.weight: llama.cpp creates the head from token_embd (TENSOR_DUPLICATED) on the output layer's
    device, so offloading the output layer costs the embedding's bytes there, while the file holds it once (the
    Qwen3-4B log in measurements/gpu_logs: 304.28 MiB more on the GPU)."""
    path = tmp_path / "tied.gguf"
    writer = GGUFWriter(str(path), "qwen3")
    writer.add_tensor("token_embd.weight", np.zeros((96, 64), dtype=np.float16))
    writer.add_tensor("blk.0.ffn_down.weight", np.zeros((64, 96), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.zeros(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    weights = read_weights(str(path))
    assert weights.tied and weights.total_bytes == 96 * 64 * 2 + 64 * 96 * 2 + 64 * 4
    everything, layer_only = Offload.of(None, 1), Offload.of(1, 1)
    assert weights.bytes_on_gpu(everything.layers, everything.output) == 64 * 96 * 2 + 64 * 4 + 96 * 64 * 2
    assert weights.bytes_on_gpu(layer_only.layers, layer_only.output) == 64 * 4 + 96 * 64 * 2  # the output layer


def test_file_sizes_replace_the_estimate_in_a_fit(tmp_path):
    write_checkpoint(tmp_path, shards=1)
    weights = read_weights(str(tmp_path))
    model = model_from_config(tiny_raw("llama"), "tiny")
    setup = Setup(model=model, engine=engine_named("transformers"), card=Card.custom(1), weights_file=weights)
    result = fit(setup, [64])
    assert result.weights_bytes == weights.total_bytes
    assert result.weights_format == "safetensors file"
    estimate = fit(replace(setup, weights_file=None), [64])
    assert estimate.weights_format == "bf16"


@pytest.mark.parametrize("content", [b"", b"\x00" * 4, b"\xff" * 16])
def test_damaged_files_give_clear_errors(tmp_path, content):
    (tmp_path / "bad.safetensors").write_bytes(content)
    with pytest.raises(InputError):
        read_weights(str(tmp_path / "bad.safetensors"))
    (tmp_path / "bad.gguf").write_bytes(content)
    with pytest.raises(InputError, match="GGUF"):
        read_weights(str(tmp_path / "bad.gguf"))


def test_hub_weights_offline_say_so():
    with pytest.raises(InputError, match="Qwen/Qwen3-8B"):
        read_weights("Qwen/Qwen3-8B")
