"""Time real llama.cpp on a lent GPU machine (the `device` tool) and keep the runs as corpus rows: a card and a CPU
kvscope's speed constants were never fitted on, so every row is a held-out check.

    python tests/bench/device_llamacpp.py host OUT_DIR          # the CPU's name, ISA, clock and RAM copy
    python tests/bench/device_llamacpp.py gguf MODEL_DIR        # random-weight Llama 2 7B shapes in F16
    python tests/bench/device_llamacpp.py rows OUT_DIR          # llama-bench JSON lines -> corpus rows

The machine has CUDA's compiler but no llama-cpp-python: llama.cpp (the commit llama-cpp-python 0.3.36 vendors,
0c1e57098, copied to an ignored folder that travels) is built there for the card alone, and llama-bench times
GGUFs whose weights are random (speed does not depend on their values; MoE routing would, so no MoE here). The GGUF
writer is the calibration's (core/speed/gguf_random.py, gguf-py alone: no llama.cpp binding). The rows follow
measurements/speed/corpus/README.md's schema, with this script as their source; they live in
measurements/speed/llamacpp_device.jsonl, beside the published corpus, and the GPU fit (tests/bench/fit_corpus.py)
reads every row whose source_id starts with SOURCE_ID_PREFIX as held out, never fitted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Llama 2 7B's shapes (meta-llama/Llama-2-7b-hf): the model of llama.cpp's scoreboards, so the rows line up with them
LLAMA2_7B = {"hidden": 4096, "ffn": 11008, "layers": 32, "heads": 32, "vocab": 32000}
MODEL_ID = "meta-llama/Llama-2-7b-hf"
SOURCE = "tests/bench/device_llamacpp.py"  # this project's own runs: the script that timed them
# llama-bench prints the driver's name; gpus.csv names the card by its memory and form factor
CARDS = {"NVIDIA H200": "H200 141GB SXM", "NVIDIA H100 80GB HBM3": "H100 80GB SXM5"}
COMMIT = "0c1e57098"
SOURCE_ID_PREFIX = "kvscope-device-"  # one source per llama-bench file: bench-h200.jsonl is kvscope-device-h200


def host(out: Path) -> None:
    from core.speed.ram import cpu_mhz, cpu_name, host_isa, ram_bandwidth

    # one thread's copy (what every CPU row records) and every core's, as the CLI measures a host: the 16 threads of
    # the first lent host decoded at 76 GB/s where one thread copied 19 GB/s
    ram = ram_bandwidth(refresh=True)
    info = {"cpu": cpu_name(), "isa": host_isa(), "mhz": cpu_mhz(), "ram_copy_gb_s": round(ram.thread_gb_s, 2),
            "ram_copy_all_gb_s": round(ram.gb_s, 2), "cores": ram.cores}  # fmt: skip
    (out / "host.json").write_text(json.dumps(info))
    print(info)


def gguf(folder: Path) -> None:
    from core.speed.gguf_random import write_f16

    folder.mkdir(parents=True, exist_ok=True)
    write_f16(folder / "llama2-7b-f16.gguf", LLAMA2_7B)


def rows(out: Path) -> list[dict]:
    """Each llama-bench JSON line (`-o jsonl`) of out/bench-*.jsonl as a corpus row, with the host beside CPU runs."""
    machine = json.loads((out / "host.json").read_text())
    result = []
    for path in sorted(out.glob("bench-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            b = json.loads(line)
            gpu = b["n_gpu_layers"] > 0
            n_prompt, n_gen, depth = b["n_prompt"], b["n_gen"], b.get("n_depth", 0)
            test = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
            cpu_fields = {} if gpu else {
                "ram_copy_gb_s": machine["ram_copy_gb_s"], "isa": machine["isa"],
                "ram_source": f"core.speed.ram on the same machine, just before ({machine['isa']}, "
                f"{machine['mhz']} MHz)",
                # every core's copy, where the host recorded it (since 2026-12-05)
                **{k: machine[k] for k in ("ram_copy_all_gb_s",) if k in machine},
            }  # fmt: skip
            result.append({
                "source": SOURCE, "source_id": SOURCE_ID_PREFIX + path.stem.removeprefix("bench-"),
                "engine": "llama.cpp", "build": COMMIT, "backend": "cuda" if gpu else "cpu",
                "card": CARDS.get(b["gpu_info"], b["gpu_info"]) if gpu else machine["cpu"], "n_devices": 1,
                "model": b["model_type"], "model_id": MODEL_ID,
                "weights": b["model_type"].split(" ", 2)[-1], "size_bytes": b["model_size"],
                "params": b["model_n_params"], "kind": "prefill" if n_prompt else "decode",
                "test": test + (f" @ d{depth}" if depth else ""), "n_prompt": n_prompt, "n_gen": n_gen,
                "depth": depth, "n_batch": b["n_batch"], "n_ubatch": b["n_ubatch"],
                "flash_attn": bool(b["flash_attn"]), "threads": b["n_threads"], "ngl": b["n_gpu_layers"],
                "concurrency": 1, "tok_s": round(b["avg_ts"], 2), "tok_s_std": round(b["stddev_ts"], 2),
                "notes": f"timed by kvscope with llama-bench (random weights, Llama 2 7B shapes), {b['test_time']}",
                **cpu_fields,
            })  # fmt: skip
    return result


def main() -> None:
    verb, where = sys.argv[1], Path(sys.argv[2])
    if verb == "host":
        host(where)
    elif verb == "gguf":
        gguf(where)
    elif verb == "rows":
        for r in rows(where):
            print(json.dumps(r, ensure_ascii=False))
    else:
        raise SystemExit(f"unknown verb {verb!r}: host, gguf or rows")


if __name__ == "__main__":
    main()
