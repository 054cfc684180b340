"""Command-line speed: `python -m core` beside `python -c pass`, the interpreter's own start, in one run.

    .venv/bin/python tests/bench/bench_cli.py            # or: make bench
    .venv/bin/python tests/bench/bench_cli.py --strict   # exit 1 when a target is missed

A report, not a test (tests/test_cli_imports.py checks what is imported, never the time). Commands run interleaved,
round after round, so a machine's load drifts into every line alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
TARGET_ABOVE_BASELINE_S = 0.5


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    from tests.tiny_configs import tiny_raw

    tmp = Path(tempfile.mkdtemp(prefix="kvscope-bench-cli-"))
    config = tmp / "tiny.json"
    config.write_text(json.dumps(tiny_raw("qwen3_5_text")))
    py = sys.executable
    cases = {  # label -> (argv, targeted)
        "python -c pass (baseline)": ([py, "-c", "pass"], False),
        "fit Qwen/Qwen3.5-9B --gpu-mem-gib 8": ([py, "-m", "core", "fit", "Qwen/Qwen3.5-9B", "--gpu-mem-gib=8"], True),
        "size <config.json>, resolved before": ([py, "-m", "core", "size", str(config)], True),
        "size <config.json>, never resolved": ([py, "-m", "core", "size", str(config)], False),
    }
    env = os.environ | {"HF_HUB_OFFLINE": "1", "KVSCOPE_CACHE": str(tmp / "warm")}
    subprocess.run(cases["size <config.json>, resolved before"][0], cwd=ROOT, env=env, check=True, capture_output=True)
    times: dict[str, list[float]] = {label: [] for label in cases}
    for i in range(args.rounds):
        for label, (argv, _) in cases.items():
            # "never resolved" gets a new empty cache each round: what the first run on a machine pays
            run_env = env | {"KVSCOPE_CACHE": str(tmp / f"cold-{i}")} if "never" in label else env
            times[label].append(timed(argv, run_env))
    shutil.rmtree(tmp, ignore_errors=True)

    base = statistics.median(times["python -c pass (baseline)"])
    print(f"\n(c) command line: {args.rounds} interleaved rounds, medians; target < {TARGET_ABOVE_BASELINE_S:.1f} s "
          "above `python -c pass`")  # fmt: skip
    print(f"  {'command':<40} {'median s':>9} {'- base s':>9} {'÷ base':>7}  target")
    results = []
    for label, (_, targeted) in cases.items():
        med = statistics.median(times[label])
        ok = med - base < TARGET_ABOVE_BASELINE_S
        mark = ("PASS" if ok else "FAIL") if targeted else "(informational)"
        if targeted:
            results.append(ok)
        print(f"  {label:<40} {med:>9.3f} {med - base:>9.3f} {med / base:>6.1f}×  {mark}")
    print(f"  {sum(results)}/{len(results)} targets met")
    return 1 if args.strict and not all(results) else 0


if __name__ == "__main__":
    sys.exit(main())
