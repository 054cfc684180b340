"""The seeds' published GPU speed figures beside kvscope's prediction: measurements/speed/published_speed.jsonl.

    python tests/bench/published_speed.py --write   # refresh the `kvscope` field of every line
    python tests/bench/published_speed.py           # print the comparison
The figures are never fitted to: every GPU efficiency they are set against is an assumed prior (efficiencies.json) or
fitted on the speed corpus (vLLM's: tests/bench/fit_corpus.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.engines import configured
from core.fit import Setup
from core.memory.gpus import card_named
from core.model.loading import load_model
from core.speed import Hardware, predict
from tests.bench.speed_runs import ROOT, git_commit

PATH = ROOT / "measurements" / "speed" / "published_speed.jsonl"
HOST = Hardware(ram_gb_s=50.0, threads=16)  # unused: every layer is on the GPU in these setups


def load() -> list[dict]:
    return [json.loads(line) for line in PATH.read_text().splitlines() if line.strip()]


def predicted(row: dict) -> float:
    setup = row["setup"]
    engine = {"vllm": "vllm", "transformers": "transformers"}[setup["engine"]]
    s = Setup(load_model(row["model"]), configured(engine), card_named(setup["gpu"]), weights=setup["dtype"])
    speed = predict(s, HOST, row["context"], setup.get("batch", 1))
    return speed.decode_tok_s if row["metric"] == "decode_tok_s" else speed.prefill_tok_s


def compare(rows: list[dict]) -> list[dict]:
    out = []
    for row in rows:
        value = predicted(row)
        out.append(row | {"kvscope": {"predicted": round(value, 1), "error": round(value / row["value"] - 1, 3)}})
    return out


def table(rows: list[dict]) -> str:
    lines = [f"{'figure':<44} {'context':>7} {'published':>9} {'kvscope':>8} {'error':>7}  flag"]
    for r in rows:
        name = f"{r['setup']['engine']} {r['metric'].replace('_tok_s', '')} {r['model'].split('/')[-1]}"
        flag = r.get("flag", "")
        lines.append(
            f"{name:<44} {r['context']:>7,} {r['value']:>9.1f} {r['kvscope']['predicted']:>8.1f} "
            f"{r['kvscope']['error']:>+7.0%}  {flag}"
        )
    return "\n".join(lines)


def main() -> None:
    rows = compare(load())
    if "--write" in sys.argv:
        commit = git_commit()
        PATH.write_text("".join(json.dumps(r | {"kvscope": r["kvscope"] | {"commit": commit}}) + "\n" for r in rows))
    print(table(rows))


if __name__ == "__main__":
    main()
