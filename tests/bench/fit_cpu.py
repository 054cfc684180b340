"""llama.cpp on CPUs: record this CPU per weight format, fit the CPU efficiencies on one CPU and check them on the
other, and write the pooled fit (with the cross-CPU error) to core/speed/fitted.json as the group (llama.cpp, cpu).

    python tests/bench/fit_cpu.py --record   # time this CPU: F16, Q8_0, Q4_0, Q4_K_M at 1 and 2 threads
    python tests/bench/fit_cpu.py            # fit and check on the recorded CPUs, write the group
CPUs: the AMD EPYC rows of measurements/speed/llamacpp_cpu.jsonl (tiny F16 models, recorded 2026-11-30) and this
project's Xeon rows of measurements/speed/llamacpp_cpu_formats.jsonl (the calibration model of core/speed/calibrate.py,
per format). Each CPU's rows are predicted with the constants fitted on the other CPU's (the cross check), then the
defaults are fitted on both. Each row uses its own measured RAM copy bandwidth and thread count.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from core.engines import configured
from core.fit import Setup
from core.memory.gpus import Card
from core.model.loading import load_model
from core.speed import efficiency as eff_module
from core.speed.calibrate import CONTEXT, MODEL, engines_python, llamacpp_runs
from core.speed.efficiency import FITTED, Efficiency, efficiency_for
from core.speed.groups import ERROR_BAND, FAMILIES, format_family
from core.speed.predict import Hardware, predict
from core.speed.ram import cpu_name, measure_ram_gb_s
from tests.bench.fit_corpus import descend, loss
from tests.bench.speed_runs import ARTIFACTS, config_path, git_commit

ROOT = Path(__file__).resolve().parents[2]
EPYC = ROOT / "measurements" / "speed" / "llamacpp_cpu.jsonl"
FORMATS_FILE = ROOT / "measurements" / "speed" / "llamacpp_cpu_formats.jsonl"
RECORD_FORMATS = ("F16", "Q8_0", "Q4_0", "Q4_K_M")
BAND = 0.25  # the CPU check: within ±25 %
CPU_KEYS = (
    "bandwidth", "decode_compute", "decode_attention", "prefill_compute", "prefill_attention", "overhead_step_s",
)  # fmt: skip
KVSCOPE_FORMAT = {"F16": "gguf_f16", "Q8_0": "q8_0", "Q4_0": "q4_0", "Q4_K_M": "q4_k_m"}


def calib_config() -> Path:
    """The calibration model's config.json (llama architecture, MHA, untied head) for kvscope to count."""
    folder = ARTIFACTS / "configs" / "calibration"
    folder.mkdir(parents=True, exist_ok=True)
    h, heads = MODEL["hidden"], MODEL["heads"]
    raw = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": h,
        "intermediate_size": MODEL["ffn"], "num_hidden_layers": MODEL["layers"], "num_attention_heads": heads,
        "num_key_value_heads": heads, "head_dim": h // heads, "vocab_size": MODEL["vocab"],
        "max_position_embeddings": 8192, "tie_word_embeddings": False, "torch_dtype": "float16",
    }  # fmt: skip
    path = folder / "config.json"
    path.write_text(json.dumps(raw, indent=1))
    return path


def record() -> None:
    python = engines_python()
    if python is None:
        sys.exit("the engines' venv cannot import llama_cpp; run `make engines`")
    load = os.getloadavg()
    ram = measure_ram_gb_s()
    runs = llamacpp_runs(python, 2, RECORD_FORMATS, MODEL, time_threads=(1, 2))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with FORMATS_FILE.open("a") as f:
        for fmt, r in runs.items():
            for run in r["runs"]:
                row = {
                    "id": f"calibration/{fmt}/{run['threads']}t", "cpu": cpu_name(), "cores": os.cpu_count(),
                    "format": fmt, "threads": run["threads"], "context": CONTEXT, "bytes": r["bytes"],
                    "prefill_tok_s": CONTEXT / run["prefill_s"], "decode_tok_s": 1 / run["decode_s"],
                    "ram_copy_gb_s": round(ram, 2), "load_average": load, "time": stamp, "commit": git_commit(),
                    "model": MODEL, "settings": "core/speed/calibrate_llamacpp.py: random-weight llama GGUF, "
                    "f16 cache, flash attention auto, n_ubatch 256 (one pass), use_extra_bufts off, 1 sequence",
                }  # fmt: skip
                f.write(json.dumps(row) + "\n")
                print(f"{fmt:>7} {run['threads']}t: decode {row['decode_tok_s']:.1f} tok/s, prefill "
                      f"{row['prefill_tok_s']:.1f} tok/s (load {load[0]:.1f})")  # fmt: skip


# -- rows of both CPUs as (cpu, setup, hardware, context, measured decode, measured prefill) ----------------------


def rows() -> list[dict]:
    out = []
    for r in (json.loads(x) for x in EPYC.read_text().splitlines() if x.strip()):
        setup = Setup(load_model(str(config_path(r["model"]))), configured("llama.cpp", n_ubatch=512),
                      Card.custom(1), weights="fp16")  # fmt: skip
        cpu = r["run"]["machine"]["cpu"]
        out.append({"cpu": cpu, "setup": setup, "hw": Hardware(r["run"]["ram_copy_gb_s"], r["threads"], True),
                    "context": r["context"], "decode": r["decode_tok_s"], "prefill": r["prefill_tok_s"],
                    "id": f"{cpu} {r['id']}"})  # fmt: skip
    if FORMATS_FILE.exists():
        model = load_model(str(calib_config()))
        for r in (json.loads(x) for x in FORMATS_FILE.read_text().splitlines() if x.strip()):
            if r["threads"] > 1 and r["load_average"][0] >= r["cores"]:
                # timed while other work held every core: ggml's threads wait on each other at every barrier while
                # one is descheduled (2 threads ran 3-4× slower than 1); kept in the file, not used
                continue
            setup = Setup(model, configured("llama.cpp", n_ubatch=512), Card.custom(1),
                          weights=KVSCOPE_FORMAT[r["format"]])  # fmt: skip
            out.append({"cpu": r["cpu"], "setup": setup, "hw": Hardware(r["ram_copy_gb_s"], r["threads"], True),
                        "context": r["context"], "decode": r["decode_tok_s"], "prefill": r["prefill_tok_s"],
                        "id": f"{r['cpu'][:14]} {r['format']}/{r['threads']}t"})  # fmt: skip
    return out


def entry_of(p: dict) -> Efficiency:
    families = tuple((f, p.get(f"{f}:decode", 1.0), p.get(f"{f}:prefill", 1.0)) for f in FAMILIES if f != "float")
    base = efficiency_for("llama.cpp", "cpu")
    return Efficiency(**{**base.__dict__, **{k: p[k] for k in CPU_KEYS}, "families": families})


def predicted(row: dict, p: dict) -> tuple[float, float]:
    s = predict(row["setup"], row["hw"], row["context"], table={("llama.cpp", "cpu"): entry_of(p)})
    return s.decode_tok_s, s.prefill_tok_s


class _Row:
    """A CPU row in fit_corpus's loss interface: tok_s(p) and measured, one per kind."""

    def __init__(self, row: dict, kind: str) -> None:
        self.row, self.kind = row, kind
        self.measured = row[kind]

    def tok_s(self, p: dict) -> float:
        return predicted(self.row, p)[0 if self.kind == "decode" else 1]


def fit(train: list[dict]) -> dict:
    base = efficiency_for("llama.cpp", "cpu")
    start = {k: getattr(base, k) for k in CPU_KEYS} | {"overhead_step_s": 1e-4}
    items = [_Row(r, k) for r in train for k in ("decode", "prefill")]
    fams = sorted({format_family(r["setup"].weights) for r in train} - {"float"})
    start |= {f"{f}:{k}": 1.0 for f in fams for k in ("decode", "prefill")}
    return descend(items, start, list(start), None, rounds=25)  # type: ignore[arg-type]


def check(p: dict, held: list[dict]) -> list[tuple[dict, float, float]]:
    out = []
    for r in held:
        dec, pre = predicted(r, p)
        out.append((r, dec / r["decode"], pre / r["prefill"]))
    return out


def summary(results: list[tuple[dict, float, float]]) -> dict:
    out = {}
    for kind, i in (("decode", 1), ("prefill", 2)):
        ratios = [x[i] for x in results]
        errors = [abs(x - 1) for x in ratios]
        out[kind] = {
            "rows": len(errors), "median": statistics.median(errors),
            "within": sum(e <= ERROR_BAND for e in errors) / len(errors),
            "within_25": sum(e <= BAND for e in errors) / len(errors), "ratio": statistics.median(ratios),
        }  # fmt: skip
    return out


def main() -> None:
    if "--record" in sys.argv:
        record()
        return
    all_rows = rows()
    cpus = sorted({r["cpu"] for r in all_rows})
    print(f"CPUs: {cpus} ({len(all_rows)} rows)")
    cross: list[tuple[dict, float, float]] = []
    for cpu in cpus:
        train = [r for r in all_rows if r["cpu"] != cpu]
        if not train:
            continue
        p = fit(train)
        res = check(p, [r for r in all_rows if r["cpu"] == cpu])
        cross += res
        print(f"\nfitted on {sorted({r['cpu'] for r in train})}, checked on {cpu}:")
        for r, d, q in res:
            print(f"  {r['id']:<34} ctx {r['context']:>5}: decode ×{d:.2f}, prefill ×{q:.2f}")
    stats = summary(cross) if cross else {}
    for kind, s in stats.items():
        print(f"cross-CPU {kind}: {s['rows']} rows, median |error| {s['median']:.1%}, within ±25 % "
              f"{s['within_25']:.0%}, typical ratio {s['ratio']:.2f}")  # fmt: skip
    pooled = fit(all_rows)
    entry = {
        **{k: v for k, v in entry_of(pooled).__dict__.items() if k != "families"},
        "families": [list(f) for f in entry_of(pooled).families], "backend": "cpu", "card_class": "cpu",
        "status": "fitted", "provenance": f"fitted by tests/bench/fit_cpu.py on {len(cpus)} CPUs ({'; '.join(cpus)}); "
        "each row at its own measured RAM copy bandwidth and threads; the error is each CPU predicted from a fit on "
        "the others", "fitted_on": f"{len(all_rows)} rows on {len(cpus)} CPUs",
        "checked_on": "each CPU against a fit on the other" if len(cpus) > 1 else "",
    }  # fmt: skip
    data = json.loads(FITTED.read_text())
    data["groups"] = [g for g in data["groups"] if g["backend"] != "cpu"] + [entry]
    data["errors"] = [e for e in data["errors"] if e["backend"] != "cpu"] + [
        {"kind": k, "engine": "llama.cpp", "backend": "cpu", "card_class": "cpu", "rows": s["rows"],
         "median": s["median"], "within": s["within"], "within_25": s["within_25"], "ratio": s["ratio"]}
        for k, s in stats.items()
    ]  # fmt: skip
    FITTED.write_text(json.dumps(data, indent=1) + "\n")
    eff_module.fitted.cache_clear()
    eff_module.fitted_groups.cache_clear()
    print(f"pooled: {json.dumps({k: round(v, 4) for k, v in pooled.items()})}; loss per row "
          f"{loss([_Row(r, k) for r in all_rows for k in ('decode', 'prefill')], pooled, None) / (2 * len(all_rows)):.3f}")  # type: ignore[arg-type]  # noqa: E501


if __name__ == "__main__":
    main()
