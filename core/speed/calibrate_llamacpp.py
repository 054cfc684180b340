"""Time llama.cpp's own matmul kernels per weight format on this CPU (run by `python -m core calibrate` in the
engines' venv, with gguf-py on PYTHONPATH; never imported by kvscope itself).

Reads a JSON job from the file named by its argument: {"dir", "threads", "context", "decode_steps", "formats":
[llama.cpp ftype names], "model": {"hidden", "ffn", "layers", "heads", "vocab"}, optionally "time_threads": [thread
counts to time with, default [threads]] and "attention": {"models": {head_dim: model}, "deep": tokens}: per head
width, a small attention-heavy model (core.speed.calibrate.attention_models) timed at `context` and at `deep` tokens
at `threads` (the attention's rate shows in the difference)}. Writes a random-weight llama GGUF in
F16 with gguf-py (no vocabulary: tokenizer.ggml.model "none"), quantises it to each format with libllama's
llama_model_quantize, then per format prefills `context` random tokens (fastest of 3) and decodes `decode_steps`
single tokens (the 10th-percentile step). Prints one JSON line: {"formats": {name: {"bytes", "runs": [{"threads",
"context", "prefill_s", "decode_s"}]}}, "attention": {head_dim: {"model", "base": run, "deep": run}}}. Weights load
without the extra (AMX repack) buffer types, as the project's CPU referee does (the repack crashes batches > 1 token
on this project's Xeon: /work/shared/reference/engines-on-cpu.md).
"""

from __future__ import annotations

import ctypes
import json
import random
import statistics
import sys
import time
from pathlib import Path

import llama_cpp
from gguf_random import write_f16  # its sibling file: this one runs as a script, never as core.speed's module


def quantize(src: Path, dst: Path, ftype: str, threads: int) -> None:
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype.upper()}")
    params.nthread = threads
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize to {ftype} returned {rc}")


def run(ctx, tokens: list[int], start: int) -> float:
    """Seconds for one llama_decode of `tokens` at positions start…, logits for the last only."""
    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, tok in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = tok, start + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        t0 = time.perf_counter()
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        llama_cpp.llama_synchronize(ctx)
        return time.perf_counter() - t0
    finally:
        llama_cpp.llama_batch_free(batch)


def time_model(path: Path, job: dict, threads: int, context: int | None = None, repeats: int = 3) -> dict:
    """Prefill of `context` (default the job's) random tokens, the fastest of `repeats`, then decode steps after it."""
    mparams = llama_cpp.llama_model_default_params()
    mparams.use_extra_bufts = False
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), mparams)
    n, steps = context or job["context"], job["decode_steps"]
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = n + steps + 8, n, min(n, 512), 1
    params.n_threads = params.n_threads_batch = threads
    ctx = llama_cpp.llama_init_from_model(model, params)
    rng = random.Random(0)
    vocab = job["model"]["vocab"]
    try:
        mem = llama_cpp.llama_get_memory(ctx)
        prefill = []
        for _ in range(repeats):
            llama_cpp.llama_memory_clear(mem, True)
            prefill.append(run(ctx, [rng.randrange(vocab) for _ in range(n)], 0))
        run(ctx, [1], n)  # warm-up step
        decode = [run(ctx, [rng.randrange(vocab)], n + 1 + i) for i in range(steps)]
        decode_s = statistics.quantiles(decode, n=10)[0]
        return {"threads": threads, "context": n, "prefill_s": min(prefill), "decode_s": decode_s}
    finally:
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    quiet = llama_cpp.llama_log_callback(lambda level, text, data: None)  # kept referenced while libllama logs
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    folder = Path(job["dir"])
    f16 = folder / "calib-f16.gguf"
    write_f16(f16, job["model"])
    out = {}
    for name in job["formats"]:
        path = f16 if name.upper() == "F16" else folder / f"calib-{name.lower()}.gguf"
        if path != f16:
            quantize(f16, path, name, job["threads"])
        runs = [time_model(path, job, t) for t in job.get("time_threads", [job["threads"]])]
        out[name] = {"bytes": path.stat().st_size, "runs": runs}
        if path != f16:
            path.unlink()
    f16.unlink()
    attention = {}
    spec = job.get("attention") or {}
    for d, m in spec.get("models", {}).items():  # core.speed.calibrate.attention_models
        path = folder / f"attn-{d}.gguf"
        write_f16(path, m)
        sub = job | {"model": m}
        base = time_model(path, sub, job["threads"])
        deep = time_model(path, sub, job["threads"], spec["deep"], repeats=1)
        attention[d] = {"model": m, "base": base, "deep": deep}
        path.unlink()
    print("\n" + json.dumps({"formats": out, "attention": attention}))


if __name__ == "__main__":
    main()
