"""Benchmark: a decode step of several sequences in llama.cpp's unified cache against the same in one stream per
sequence, real llama.cpp on this CPU, side by side, with kvscope's prediction of each.

    python tests/bench/bench_unified.py        (the engines' venv must exist: make engines)

In a unified cache (llama-server's 4 default slots, --kv-unified) every sequence's cells sit in one stream, and each
token's attention runs over the whole stream with the other sequences' cells masked (llama-graph.cpp: the KQ mask
is built over n_kv cells of the stream). Split streams give each sequence its own. Whether the masked cells cost
time is the kernels' business: ggml-cpu's flash attention skips a cell whose mask is -inf before reading its K or V
(ops.cpp, ggml_compute_forward_flash_attn_ext_f16_one_chunk), and without flash attention the KQ product is a
matmul over every cell of the stream. kvscope times a step's attention over each sequence's own cells and reads the
stream's cells once. This prints the measured step times, their ratio unified ÷ split, and kvscope's.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.engines import configured
from core.fit import Setup
from core.memory.gpus import Card
from core.model.loading import load_model
from core.speed import Hardware, predict
from core.speed.ram import measure_ram_gb_s
from tests.bench.speed_runs import build_ggufs, config_path, run_llamacpp

MODEL = "llama-s"  # MHA, 64 wide: the cache is most of a step's bytes at these contexts
SEQUENCES = 4
CONTEXTS = (1024, 4096)
THREADS = 2


def cases() -> list[dict]:
    return [
        {"id": f"{fa}/{'unified' if unified else 'split'}/{n}", "model": MODEL, "context": n, "threads": THREADS,
         "sequences": SEQUENCES, "kv_unified": unified, "flash_attn": fa, "decode_steps": 24}
        for n in CONTEXTS for fa in ("on", "off") for unified in (True, False)
    ]  # fmt: skip


def predicted_step_s(case: dict, ram_gb_s: float) -> float:
    engine = configured(
        "llama.cpp", kv_unified=case["kv_unified"], n_seq_max=SEQUENCES, flash_attn=case["flash_attn"] == "on"
    )
    setup = Setup(load_model(str(config_path(MODEL))), engine, Card.custom(1), weights="fp16")
    hw = Hardware(ram_gb_s=ram_gb_s, threads=THREADS, cpu_only=True)
    return 1.0 / predict(setup, hw, case["context"], SEQUENCES).decode_tok_s


def main() -> None:
    ram = measure_ram_gb_s()
    # the fastest of two interleaved passes (run_llamacpp): a step's time is the sequences over its tok/s
    measured = {r["id"]: SEQUENCES / r["decode_tok_s"] for r in run_llamacpp(build_ggufs((MODEL,)), cases())}
    print(f"{MODEL}, {SEQUENCES} sequences a step, {THREADS} threads, RAM {ram:.1f} GB/s")
    print(f"{'flash':>5} {'context':>7} | {'unified ms':>10} {'split ms':>9} {'ratio':>6} | {'kvscope ratio':>13}")
    for n in CONTEXTS:
        for fa in ("on", "off"):
            u, s = measured[f"{fa}/unified/{n}"], measured[f"{fa}/split/{n}"]
            pu, ps = (predicted_step_s(c, ram) for c in cases() if c["id"] in (f"{fa}/unified/{n}", f"{fa}/split/{n}"))
            print(f"{fa:>5} {n:>7,} | {u * 1e3:>10.2f} {s * 1e3:>9.2f} {u / s:>6.2f} | {pu / ps:>13.2f}")


if __name__ == "__main__":
    main()
