"""`python -m core calibrate`: measure this host's RAM bandwidth and CPU matmul rate per weight format, and store
them (core.speed.calibration). Through llama.cpp itself when the engines' venv has llama-cpp-python (a random-weight
GGUF quantised to each format, core/speed/calibrate_llamacpp.py); otherwise a numpy float32 GEMM, which rates only
float prefill (numpy runs no quantised kernel, and its GEMV would time numpy, not llama.cpp's decode).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import tempfile
import time
from pathlib import Path

from core.dtypes import FP16
from core.errors import InputError
from core.files import engines_venv_python, measuring
from core.model.layers import FullAttention, Storage
from core.probe.runner import kvscope_revision
from core.speed.calibration import Calibration, host_key
from core.speed.ram import ram_bandwidth
from core.speed.work import attended_sum, attention_flops_per_key
from core.units import plural

RUNNER = Path(__file__).resolve().parent / "calibrate_llamacpp.py"
FORMATS = ("F16", "Q8_0", "Q4_0", "Q4_K_M", "Q6_K", "IQ4_XS")  # float, legacy, k-quant and i-quant kernels
# past a server CPU's L3 at 4 bits (~190 MB at Q4_K_M, ~680 MB at F16); 6 layers keep a run under a minute
MODEL = {"hidden": 2048, "ffn": 5632, "layers": 6, "heads": 16, "vocab": 8000}
CONTEXT = 256
DEEP = 2048  # each attention model's second prompt: the attention's rate from the difference
# each attention model's cache at DEEP tokens (its layers follow): past what a CPU's caches hold of it, as a real
# model's cache is. A 2-layer model's 8 MiB at width 64 timed 1.6-1.8x faster per key on this project's Xeon than
# llama-s's and llama-m's caches (17-168 MB) did; 8 or more layers timed as they do.
ATTENTION_KV_BYTES = 64 * 2**20
HEAD_DIMS = (64, 128, 256)  # gpt-oss and small models; Llama, Qwen; Gemma 3 and Qwen3.5's full-attention layers
DECODE_STEPS = 48  # the 10th-percentile step of 48: steps a busy machine did not slow
F16_CACHE = Storage(FP16, FP16, FP16, FP16)  # the attention models' cache: llama.cpp's default f16 K and V


def engines_python() -> Path | None:
    """The engines' venv python if it can import llama_cpp (KVSCOPE_ENGINES_VENV, else the repo's .venv-engines)."""
    python = engines_venv_python()
    if not python.exists():
        return None
    ok = subprocess.run([str(python), "-c", "import llama_cpp"], capture_output=True, timeout=120)
    return python if ok.returncode == 0 else None


def matmul_flops(m: dict, tokens: int) -> float:
    """The calibration model's weight matmul FLOPs for `tokens` tokens, the output head on the last one only."""
    h, f = m["hidden"], m["ffn"]
    return 2.0 * m["layers"] * (4 * h * h + 3 * h * f) * tokens + 2.0 * m["vocab"] * h


def rates_from(results: dict, threads: int, model: dict) -> tuple[tuple[str, float, float], ...]:
    """Effective GFLOP/s per thread per format from the runner's seconds at `threads`."""
    out = []
    for name, r in results.items():
        run = next(x for x in r["runs"] if x["threads"] == threads)
        decode = matmul_flops(model, 1) / (threads * run["decode_s"]) / 1e9
        out.append((name, decode, matmul_flops(model, CONTEXT) / (threads * run["prefill_s"]) / 1e9))
    return tuple(out)


def attention_models(head_dims: tuple[int, ...], deep: int = DEEP) -> dict[str, dict]:
    """Per head width d, two attention models the runner times: 8 query heads of width d, each with its own K/V
    ("d", MHA) or four to a K/V head ("d-gqa", as Llama 3 and Qwen group them); an FFN one head wide (its time
    cancels in the difference); the fewest layers (at least 2) whose f16 cache at `deep` tokens reaches
    ATTENTION_KV_BYTES. The two read the same FLOPs per key from a quarter of the bytes: apart, the cache's streaming
    rate and the attention's FLOP rate (attention_rates)."""
    out = {}
    for d in head_dims:
        for label, kv_heads in ((f"{d}", 8), (f"{d}-gqa", 2)):
            m = {"hidden": 8 * d, "ffn": d, "heads": 8, "kv_heads": kv_heads, "vocab": 1000}
            per_layer = FullAttention(kv_heads, d).bytes_per_token(F16_CACHE) * deep
            out[label] = m | {"layers": max(2, math.ceil(ATTENTION_KV_BYTES / per_layer))}
    return out


def attention_rates(attention: dict, threads: int) -> tuple[tuple[int, float | None, float | None, float | None], ...]:
    """(head_dim, decode GFLOP/s, prefill GFLOP/s, decode cache GB/s) per thread per head width, from each attention
    model's run at DEEP tokens beside its run at CONTEXT: the extra seconds over the extra attention FLOPs and cache
    bytes, counted by core.speed.work's own functions (FLOPs per key; a prefill's query i attends to i keys).

    Decode is a roofline, max(cache ÷ GB/s, FLOPs ÷ GFLOP/s): each rate is the fastest its models show, so the
    MHA model (four times the GQA one's bytes for the same FLOPs) is timed by its bytes and the GQA one by its
    FLOPs, and a model of another grouping falls between. Prefill re-reads each key from the CPU's caches: its rate
    is the MHA model's. A rate is None where the deep run took no longer than its matmuls (noise)."""
    widths: dict[int, list[tuple[float, float, float, float]]] = {}
    for r in attention.values():
        base, deep, m = r["base"], r["deep"], r["model"]
        d, kv_heads = m["hidden"] // m["heads"], m.get("kv_heads", m["heads"])
        layer = FullAttention(kv_heads, d)
        per_key = attention_flops_per_key(layer, m["heads"]) * m["layers"]
        key_bytes = layer.bytes_per_token(F16_CACHE) * m["layers"]
        n, k = base["context"], deep["context"]
        decode_s = (deep["decode_s"] - base["decode_s"]) / (k - n) * threads  # thread-seconds per extra key
        prefill_s = deep["prefill_s"] - k / n * base["prefill_s"]  # the matmuls scale with the tokens
        pairs = attended_sum(k, None) - k / n * attended_sum(n, None)  # query-key pairs beyond the matmuls' share
        prefill = per_key * pairs / (threads * prefill_s) if prefill_s > 0 and kv_heads == m["heads"] else 0.0
        widths.setdefault(d, []).append((decode_s, per_key, key_bytes, prefill))
    out = []
    for d, runs in sorted(widths.items()):
        timed = [(s, f, b) for s, f, b, _ in runs if s > 0]
        decode = max((f / s / 1e9 for s, f, _ in timed), default=None)
        stream = max((b / s / 1e9 for s, _, b in timed), default=None)
        prefill = max((p / 1e9 for *_, p in runs), default=0.0) or None
        out.append((d, decode, prefill, stream))
    return tuple(out)


def llamacpp_runs(
    python: Path,
    threads: int,
    formats: tuple[str, ...],
    model: dict,
    time_threads: tuple[int, ...] = (),
    head_dims: tuple[int, ...] = (),
) -> dict:
    """The runner's {"formats": {format: {"bytes", "runs": [{"threads", "prefill_s", "decode_s"}]}} (CONTEXT-token
    prompts), "attention": {label: {"model", "base", "deep"}}} (attention_models(head_dims))."""
    gguf_py = python.parent.parent / "llama.cpp" / "gguf-py"
    env = os.environ | {"PYTHONPATH": str(gguf_py)} if gguf_py.exists() else dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="kvscope-calibrate-") as tmp:
        job = Path(tmp) / "job.json"
        spec = {"dir": tmp, "threads": threads, "context": CONTEXT, "decode_steps": DECODE_STEPS}
        spec |= {"formats": list(formats), "model": model, "time_threads": list(time_threads or (threads,))}
        spec |= {"attention": {"models": attention_models(head_dims), "deep": DEEP}} if head_dims else {}
        job.write_text(json.dumps(spec))
        cmd = [str(python), str(RUNNER), str(job)]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if out.returncode != 0:
        raise InputError(f"llama.cpp calibration failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def numpy_rates(threads: int) -> tuple[tuple[str, None, float], ...]:
    """Best of 3 float32 GEMMs of a 512-token chunk by a 2048 × 5632 matrix: prefill GFLOP/s per thread."""
    import numpy as np  # only when measuring

    rng = np.random.default_rng(0)
    a = rng.standard_normal((CONTEXT * 2, MODEL["hidden"]), dtype=np.float32)
    b = rng.standard_normal((MODEL["hidden"], MODEL["ffn"]), dtype=np.float32)
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    flops = 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
    return (("f32", None, flops / best / threads / 1e9),)


def calibrate(
    threads: int | None = None,
    engine: str = "auto",
    formats: tuple[str, ...] = FORMATS,
    model: dict = MODEL,
    head_dims: tuple[int, ...] = HEAD_DIMS,
) -> Calibration:
    """Measure this host now. engine: "llama.cpp" (fail without it), "numpy", or "auto" (llama.cpp if importable);
    `model` (the random-weight GGUF's shape) and `head_dims` are fewer only in tests."""
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:  # stored, its rates per thread would read far too slow for good
        raise InputError(f"--threads {threads:,}: this host has {plural(cores, 'core')}; give at most {cores}")
    with _one_at_a_time():
        return _calibrate(threads or cores, engine, formats, model, head_dims)


def _one_at_a_time() -> contextlib.AbstractContextManager[int]:
    """One probe or calibration at a time on this host, whichever process started it (two would time each other):
    its measuring lock (core.files.measuring). Taken before any timing, so a folder the result cannot be stored in
    is said at once."""
    pid = os.getpid()
    since = time.strftime("%H:%M:%S UTC", time.gmtime())
    return measuring(
        {"running": f"a calibration (pid {pid}) since {since}", "stop": f"stop it (kill {pid})"}, InputError
    )


def _calibrate(
    threads: int, engine: str, formats: tuple[str, ...], model: dict, head_dims: tuple[int, ...]
) -> Calibration:
    python = engines_python() if engine != "numpy" else None
    if engine == "llama.cpp" and python is None:
        raise InputError("llama-cpp-python is not importable in the engines' venv; run `make engines`, set "
                         "KVSCOPE_ENGINES_VENV, or calibrate with --with numpy")  # fmt: skip
    ram = ram_bandwidth(refresh=True)
    if python is not None:
        version = subprocess.run(
            [str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"], capture_output=True, text=True
        ).stdout.strip()
        # the formats timed with one thread as well: a rate per thread from all threads can be the memory's share
        counts = (1, threads) if threads > 1 else (threads,)
        runs = llamacpp_runs(python, threads, formats, model, time_threads=counts, head_dims=head_dims)
        rates: tuple = rates_from(runs["formats"], threads, model)
        single: tuple = rates_from(runs["formats"], 1, model) if threads > 1 else ()
        attention: tuple = attention_rates(runs["attention"], threads)
        method = f"llama.cpp {version} (llama-cpp-python), {threads} threads, random-weight GGUF per format"
    else:
        rates = numpy_rates(threads)
        attention = single = ()  # numpy times no attention kernel (nor a thread count apart)
        method = f"numpy float32 GEMM, {threads} threads (float prefill only)"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return Calibration(
        host_key(), stamp, method, round(ram.gb_s, 2), threads, rates, attention, single, round(ram.thread_gb_s, 2),
        kvscope_revision(),
    )  # fmt: skip
