"""Fit the CPU efficiencies of llama.cpp and transformers to the recorded runs and write them to
core/speed/efficiencies.json with their provenance.

    python tests/bench/fit_speed.py
Fits on FIT_MODEL's rows only; the other model's rows are the check (tests/bench/bench_speed.py reports them).
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.speed.efficiency import DATA
from tests.bench.speed_fit import fit, predicted
from tests.bench.speed_runs import ROOT

FIT_MODEL = "llama-s"
RECORDS = {"llama.cpp": "llamacpp_cpu.jsonl", "transformers": "transformers_cpu.jsonl"}


def load(engine: str) -> list[dict]:
    path = ROOT / "measurements" / "speed" / RECORDS[engine]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def describe(rows: list[dict]) -> str:
    models = sorted({r["model"] for r in rows})
    contexts = sorted({r["context"] for r in rows})
    threads = sorted({r["threads"] for r in rows})
    return f"{', '.join(models)} at contexts {contexts}, threads {threads}"


def main() -> None:
    data = json.loads(DATA.read_text())
    for engine in RECORDS:
        rows = load(engine)
        train = [r for r in rows if r["model"] == FIT_MODEL]
        check = [r for r in rows if r["model"] != FIT_MODEL]
        ram = train[0]["run"]["ram_copy_gb_s"]
        eff, loss = fit(train, engine, ram)
        mean = loss / (2 * len(train))
        run = train[0]["run"]
        entry = asdict(eff) | {
            "status": "fitted",
            "provenance": (
                f"fitted by tests/bench/fit_speed.py to measurements/speed/{RECORDS[engine]} (recorded "
                f"{run['time']} on {run['machine']['cpu']}, {run['machine']['cores']} cores, RAM copy {ram} GB/s, "
                f"commit {run['commit']}); mean absolute log error on the fit rows {mean:.3f}. Tiny random-weight "
                f"{'F16 GGUFs' if engine == 'llama.cpp' else 'fp32 models'}: the figures describe this engine on this "
                "CPU, not a general CPU"
            ),
            "fitted_on": describe(train),
            "checked_on": describe(check),
        }
        data["entries"] = [entry if (e["engine"], e["device"]) == (engine, "cpu") else e for e in data["entries"]]
        print(f"{engine}: {json.dumps({k: entry[k] for k in entry if k not in ('provenance',)}, indent=1)}")
        for r in rows:
            dec, pre, bound = predicted(r, engine, ram, {(engine, "cpu"): eff})
            tag = "fit" if r["model"] == FIT_MODEL else "check"
            print(
                f"  {tag:5} {r['id']:>18}  decode {dec:8.1f} vs {r['decode_tok_s']:8.1f} "
                f"({dec / r['decode_tok_s'] - 1:+.0%}) "
                f"prefill {pre:8.1f} vs {r['prefill_tok_s']:8.1f} ({pre / r['prefill_tok_s'] - 1:+.0%}) {bound}"
            )
    DATA.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
