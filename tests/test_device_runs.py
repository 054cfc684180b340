"""This project's own llama.cpp runs on a lent GPU machine (tests/bench/device_llamacpp.py; an H200 and its host's
Xeon, 2026-12-04): the rows kept are what the script makes of llama-bench's own JSON lines, kept beside them, and
the GPU fit never sees them: each is a held-out check of a card and a CPU nothing was fitted on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf

from core.memory.gpus import card_named
from core.model.params import count_params
from core.speed.gguf_random import write_f16
from tests.bench import device_llamacpp, fit_corpus

ROOT = Path(__file__).resolve().parent.parent
RAW = ROOT / "measurements" / "speed" / "device_2026-12-04"
ROWS = [json.loads(line) for line in fit_corpus.DEVICE_RUNS.read_text().splitlines()]


def test_the_rows_are_what_the_script_makes_of_llama_benchs_output():
    assert device_llamacpp.rows(RAW) == ROWS
    raw = sum(1 for p in RAW.glob("bench-*.jsonl") for line in p.read_text().splitlines() if line.startswith("{"))
    assert len(ROWS) == raw == 16


def test_each_row_names_a_listed_card_or_its_recorded_cpu_and_the_model_that_ran():
    host = json.loads((RAW / "host.json").read_text())
    params = count_params(fit_corpus.model_of(device_llamacpp.MODEL_ID)).total  # the config the fit loads
    for r in ROWS:
        if r["backend"] == "cuda":
            assert card_named(r["card"]).bandwidth_gb_s, r["card"]
        else:
            assert (r["card"], r["isa"], r["ram_copy_gb_s"]) == (host["cpu"], host["isa"], host["ram_copy_gb_s"])
        assert abs(params - r["params"]) <= 0.01 * r["params"], (params, r["params"])  # Llama 2 7B's shapes


def test_the_gpu_fit_holds_every_device_row_out():
    rows, _ = fit_corpus.load_rows()
    device = [r for r in rows if r.raw["source_id"].startswith(fit_corpus.DEVICE_SOURCE)]
    assert len(device) == sum(r["backend"] == "cuda" for r in ROWS) == 14
    assert all(r.held_out for r in device)


def test_the_gguf_writer_needs_no_llama_cpp_binding_and_writes_the_shapes_asked(tmp_path):
    """The device run and the calibration write their random-weight model with core/speed/gguf_random.py, which
    imports gguf-py alone: the lent machine has no llama-cpp-python. Read back with gguf-py's own reader."""
    probe = "import sys, core.speed.gguf_random; assert 'llama_cpp' not in sys.modules"  # in a fresh interpreter
    subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True)

    path = tmp_path / "tiny.gguf"
    write_f16(path, {"hidden": 64, "ffn": 96, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 50})
    reader = gguf.GGUFReader(path)
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml's ne order: (in, out)
    assert shapes["blk.1.attn_k.weight"] == (64, 32)  # 2 KV heads × 16 wide: grouped-query attention
    assert shapes["blk.0.ffn_down.weight"] == (96, 64) and shapes["output.weight"] == (64, 50)
    assert len(shapes) == 2 + 2 * 9 + 1  # embeddings, output norm and head; 9 tensors per layer
    kv = reader.fields["llama.attention.head_count_kv"]
    assert int(kv.parts[kv.data[0]][0]) == 2
