"""A random-weight llama GGUF in F16, written with gguf-py alone (no llama.cpp binding): the model the calibration
quantises and times (calibrate_llamacpp.py, which runs as a script and imports this file as its sibling) and the one
the lent-GPU run benchmarks (tests/bench/device_llamacpp.py)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_f16(path: Path, m: dict) -> None:
    """A llama-architecture GGUF with random F16 matrices (numpy shape (out, in): ggml's ne reversed)."""
    h, f, n, heads, vocab = m["hidden"], m["ffn"], m["layers"], m["heads"], m["vocab"]
    kv_heads = m.get("kv_heads", heads)  # fewer than heads: grouped-query attention shares K and V
    kv = kv_heads * (h // heads)  # K and V projections' rows
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(8192)
    w.add_embedding_length(h)
    w.add_block_count(n)
    w.add_feed_forward_length(f)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(h // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("none")
    w.add_vocab_size(vocab)

    def mat(name: str, rows: int, cols: int) -> None:
        w.add_tensor(name, (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16))

    def norm(name: str) -> None:
        w.add_tensor(name, np.ones(h, dtype=np.float32))

    mat("token_embd.weight", vocab, h)
    for i in range(n):
        norm(f"blk.{i}.attn_norm.weight")
        for t, rows in (("q", h), ("k", kv), ("v", kv), ("output", h)):
            mat(f"blk.{i}.attn_{t}.weight", rows, h)
        norm(f"blk.{i}.ffn_norm.weight")
        mat(f"blk.{i}.ffn_gate.weight", f, h)
        mat(f"blk.{i}.ffn_up.weight", f, h)
        mat(f"blk.{i}.ffn_down.weight", h, f)
    norm("output_norm.weight")
    mat("output.weight", vocab, h)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
