"""Real speed runs on this CPU: the tiny random-weight models, llama.cpp and the transformers probe.

Shared by `tests/bench/bench_speed.py` (which times them live) and `tests/bench/record_speed.py` (which appends a
run to measurements/speed/). GGUFs are built once with llama.cpp's own converter into tests/artifacts/speed/.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("KVSCOPE_ENGINES_VENV", str(ROOT / ".venv-engines"))
ARTIFACTS = ROOT / "tests" / "artifacts" / "speed"

# Llama-architecture models: two sizes with every head keeping its own K/V (MHA), so the cache is a visible share of
# each decode step's bytes and a fit on one can be checked on the other, and one with grouped-query attention 128
# wide. F16 weights (the converter's --outtype f16).
_BASE = {
    "model_type": "llama",
    "vocab_size": 32000,
    "max_position_embeddings": 16384,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
}
MODELS: dict[str, dict[str, Any]] = {
    "llama-s": _BASE
    | {
        "hidden_size": 512,
        "intermediate_size": 1536,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 64,
    },
    "llama-m": _BASE
    | {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 10,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 64,
    },
    # grouped-query attention, 128 wide (Llama 3's and Qwen's shape): no calibration attention model has it
    "llama-g": _BASE
    | {
        "hidden_size": 1024,
        "intermediate_size": 2816,
        "num_hidden_layers": 8,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 128,
    },
}
CONTEXTS = (256, 1024, 4096)
SETTINGS = "F16 GGUF, f16 cache, flash attention auto, n_ubatch 512, use_extra_bufts off, 1 sequence"  # llama.cpp's
THREADS = (1, 2)
DECODE_STEPS = 32


def config_path(name: str) -> Path:
    """The model's config.json for kvscope (and for the transformers probe, which takes a config path)."""
    folder = ARTIFACTS / "configs" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    raw = {**MODELS[name], "architectures": ["LlamaForCausalLM"]}
    if not path.exists() or json.loads(path.read_text()) != raw:
        path.write_text(json.dumps(raw, indent=1))
    return path


def _engines(args: list[str], timeout: float) -> str:
    from tests.engines.engine_env import run_in_engines

    return run_in_engines(args, timeout=timeout).stdout


def build_ggufs(names: tuple[str, ...] = tuple(MODELS)) -> dict[str, str]:
    from tests.engines.engine_env import LLAMACPP_TREE

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    job = {"tree": str(LLAMACPP_TREE), "out_dir": str(ARTIFACTS), "models": {n: MODELS[n] for n in names}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    out = _engines([str(ROOT / "tests" / "engines" / "llamacpp_gguf.py"), f.name], timeout=1800)
    return json.loads(out.strip().splitlines()[-1])


def llamacpp_cases(names, contexts=CONTEXTS, threads=THREADS, steps=DECODE_STEPS) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{m}/{t}t/{c}",
            "model": m,
            "context": c,
            "threads": t,
            "decode_steps": steps,
            "flash_attn": "auto",
            "n_ubatch": 512,
        }
        for m in names
        for t in threads
        for c in contexts
    ]


PASSES = 2  # every case is timed in this many interleaved passes and the fastest kept: the machine is shared


def best_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per id (a "#pass" suffix dropped), the fastest decode and the fastest prefill of its passes."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        key = r["id"].split("#")[0]
        r = r | {"id": key}
        if key not in out:
            out[key] = r | {"passes": 1}
            continue
        best = out[key]
        best["passes"] += 1
        for field in ("decode_tok_s", "prefill_tok_s"):
            best[field] = max(best[field], r[field])
    return list(out.values())


def run_llamacpp(ggufs: dict[str, str], cases: list[dict[str, Any]], passes: int = PASSES) -> list[dict[str, Any]]:
    """Time every case in one engines-venv process, `passes` times over (interleaved), keeping the fastest."""
    cases = [c | {"id": f"{c['id']}#{k}"} for k in range(passes) for c in cases]
    job = {"models": ggufs, "cases": cases}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    out = _engines([str(ROOT / "tests" / "bench" / "llamacpp_speed_runner.py"), f.name], timeout=3600)
    measured = {r["id"]: r for r in json.loads(out.strip().splitlines()[-1])["cases"]}
    return best_of([case | measured[case["id"]] for case in cases])


def time_llamacpp(
    names=tuple(MODELS), contexts=CONTEXTS, threads=THREADS, passes: int = PASSES
) -> list[dict[str, Any]]:
    """Build the GGUFs (once) and time every model × threads × context, after a throw-away first case (the first
    decode after loading faults the mmapped weights in)."""
    ggufs = build_ggufs(tuple(names))
    warm = [c | {"id": "warm-" + c["id"]} for c in llamacpp_cases(names[:1], (256,), (threads[-1],), 4)]
    rows = run_llamacpp(ggufs, warm + llamacpp_cases(names, contexts, threads), passes)
    return [r for r in rows if not r["id"].startswith("warm-")]


def engines_versions() -> dict[str, str]:
    out = _engines(["-c", "import llama_cpp, json; print(json.dumps({'llama_cpp_python': llama_cpp.__version__}))"], 60)
    return json.loads(out.strip().splitlines()[-1])


def host() -> dict[str, Any]:
    from core.speed.ram import cpu_name

    return {"host": platform.node(), "cpu": cpu_name(), "cores": os.cpu_count(), "machine": platform.machine()}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


PROBE_DTYPE = "fp32"  # what the transformers probe computes in on this CPU (bf16 eager decode is ~100x slower here)


def run_probe_speeds(names, contexts=CONTEXTS, steps: int = 16, passes: int = PASSES) -> list[dict[str, Any]]:
    """The transformers probe (core.probe, run as the app runs it) on each model at full depth, CPU, random weights,
    `passes` times over. Returns one row per model and context with its fastest prefill and decode tok/s."""
    from core.probe import ProbeRequest, run_probe

    rows = []
    for name in [n for _ in range(passes) for n in names]:
        layers = MODELS[name]["num_hidden_layers"]
        request = ProbeRequest(
            model=str(config_path(name)),
            contexts=tuple(contexts),
            device="cpu",
            decode_steps=steps,
            scale_layers=layers,
            weights="random",
            dtype=PROBE_DTYPE,
        )
        result = run_probe(request, timeout=1800, directory=ARTIFACTS / "probe", record=False)
        if not result.ok:
            raise RuntimeError(f"probe of {name} failed: {result.error}\n{result.log_tail}")
        for c in result.contexts:
            rows.append(
                {
                    "id": f"{name}/{c.context}",
                    "model": name,
                    "context": c.context,
                    "threads": os.cpu_count(),
                    "dtype": PROBE_DTYPE,
                    "decode_steps": steps,
                    "prefill_tok_s": c.prefill_tok_s,
                    "decode_tok_s": c.decode_tok_s,
                    "decode_mode": c.decode_mode,
                    "versions": result.env.get("versions", result.env),
                }
            )
    return best_of(rows)
