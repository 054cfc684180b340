"""Record real speed runs on this machine into measurements/speed/ (llama.cpp and the transformers probe).

    python tests/bench/record_speed.py           # every model, context and thread count in speed_runs
Writes llamacpp_cpu.jsonl and transformers_cpu.jsonl (one run: replaced, not appended) with the host, versions,
RAM bandwidth, load average and commit on every line. Fit efficiencies from them with tests/bench/fit_speed.py.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.speed.ram import measure_ram_gb_s
from tests.bench.speed_runs import (
    CONTEXTS,
    MODELS,
    ROOT,
    SETTINGS,
    THREADS,
    engines_versions,
    git_commit,
    host,
    now,
    run_probe_speeds,
    time_llamacpp,
)

OUT = ROOT / "measurements" / "speed"


def provenance(ram_gb_s: float) -> dict:
    return {
        "time": now(),
        "machine": host(),
        "ram_copy_gb_s": round(ram_gb_s, 2),
        "load_average": os.getloadavg(),
        "commit": git_commit(),
        "weights": "random (tiny llama-architecture configs in tests/bench/speed_runs.py): speed is real, text is not",
    }


def main() -> None:
    names = tuple(MODELS)
    ram = measure_ram_gb_s()
    rows = time_llamacpp(names, CONTEXTS, THREADS)
    meta = provenance(ram) | {
        "engine": "llama.cpp",
        "versions": engines_versions(),
        "settings": SETTINGS,
    }
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "llamacpp_cpu.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps(r | {"run": meta}) + "\n")
    probe_rows = run_probe_speeds(names, CONTEXTS)
    meta = provenance(ram) | {"engine": "transformers", "settings": "core.probe, CPU, eager decode, logits_to_keep=1"}
    with (OUT / "transformers_cpu.jsonl").open("w") as f:
        for r in probe_rows:
            f.write(json.dumps(r | {"run": meta}) + "\n")
    for r in rows + probe_rows:
        print(f"{r['id']:>22}  prefill {r['prefill_tok_s']:9.1f} tok/s  decode {r['decode_tok_s']:8.1f} tok/s")


if __name__ == "__main__":
    main()
