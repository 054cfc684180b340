"""Time real llama.cpp prefill and decode on this CPU (run in the engines' venv).

Reads JSON from the file named by its argument: {"models": {name: gguf path}, "cases": [{"id", "model", "context",
"threads", "decode_steps", "flash_attn": "auto"|"on"|"off", "n_ubatch"}]}. Each case makes a fresh context,
prefills `context` random tokens (logits only for the last one, as llama-cli does; the fastest of `prefill_reps`,
3 up to 1,024 tokens and 2 beyond),
then decodes `decode_steps` single tokens one llama_decode at a time after one warm-up step; decode tok/s is one over
the 10th-percentile step (the median is kept too), so other work on a shared machine moves it little. A case with
"sequences" and "kv_unified" prefills that many sequences in one context instead and times steps of one token each
(run_sequences). Prints one JSON line: {"cases": [{"id", "prefill_s", "prefill_tok_s", "decode_step_p10_s",
"decode_tok_s", ...}]}.

Weights are loaded without the extra (AMX repack) buffer types: on this CPU they crash batches > 1 token
(/work/shared/reference/engines-on-cpu.md), and the repacked layout would time a different kernel anyway.
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

FLASH = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def quiet(level: int, text: bytes, user_data) -> None:
    pass


QUIET = llama_cpp.llama_log_callback(quiet)


def run_batch(ctx, cells: list[tuple[int, int, int, bool]]) -> None:
    """One llama_decode of (token, position, sequence, logits?) cells."""
    batch = llama_cpp.llama_batch_init(len(cells), 0, 1)
    try:
        for i, (tok, pos, seq, logits) in enumerate(cells):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = tok, pos, 1, logits
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(cells)
        rc = llama_cpp.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
    finally:
        llama_cpp.llama_batch_free(batch)


def decode(ctx, tokens: list[int], start: int, ubatch: int, seq: int = 0) -> None:
    """One llama_decode of `tokens` at positions start… of sequence `seq`; logits only for the last (llama-cli's
    prompt eval)."""
    run_batch(ctx, [(tok, start + i, seq, i == len(tokens) - 1) for i, tok in enumerate(tokens)])


def step(ctx, tokens: list[int], pos: int) -> None:
    """One decode step of len(tokens) sequences, sequence i adding tokens[i] at position `pos` (a server's batch)."""
    run_batch(ctx, [(tok, pos, i, True) for i, tok in enumerate(tokens)])


def new_context(model, case: dict, n_ctx: int, n_batch: int, n_ubatch: int, n_seq_max: int, unified: bool):
    """A libllama context for a case (its threads and flash attention), or None where libllama refuses it."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch, params.n_seq_max = n_ctx, n_batch, n_ubatch, n_seq_max
    params.kv_unified = unified
    params.n_threads = params.n_threads_batch = case["threads"]
    params.flash_attn_type = FLASH[case.get("flash_attn", "auto")]
    params.no_perf = True
    return llama_cpp.llama_init_from_model(model, params)


def run_sequences(model, vocab: int, case: dict) -> dict:
    """`sequences` prompts of `context` tokens each in one context (n_seq_max = sequences, `kv_unified` as given),
    then `decode_steps` steps each adding one token to every sequence: decode_step_p10_s is a step's time."""
    n, k, steps = case["context"], case["sequences"], case["decode_steps"]
    ubatch = case.get("n_ubatch", 512)
    # split streams: each sequence gets n_ctx / n_seq_max cells
    ctx = new_context(model, case, k * (n + steps + 8), ubatch, ubatch, k, case["kv_unified"])
    if not ctx:
        return {"id": case["id"], "error": "llama_init_from_model failed"}
    rng = random.Random(n)
    try:
        for seq in range(k):
            for start in range(0, n, ubatch):
                chunk = [rng.randrange(vocab) for _ in range(min(ubatch, n - start))]
                decode(ctx, chunk, start, ubatch, seq)
        step(ctx, [rng.randrange(vocab) for _ in range(k)], n)  # warm-up step
        steps_s = []
        for i in range(steps):
            t0 = time.perf_counter()
            step(ctx, [rng.randrange(vocab) for _ in range(k)], n + 1 + i)
            llama_cpp.llama_synchronize(ctx)
            steps_s.append(time.perf_counter() - t0)
        fast = statistics.quantiles(steps_s, n=10)[0]
        return {
            "id": case["id"], "decode_step_p10_s": fast, "decode_step_median_s": statistics.median(steps_s),
            "decode_tok_s": k / fast, "prefill_tok_s": 0.0,  # tokens a second over all sequences; no prompt timed
        }  # fmt: skip
    finally:
        llama_cpp.llama_free(ctx)


def run_case(model, vocab: int, case: dict) -> dict:
    if "sequences" in case:
        return run_sequences(model, vocab, case)
    n = case["context"]
    steps = case["decode_steps"]
    ubatch = case.get("n_ubatch", 512)
    # the whole prompt in one llama_decode (n_batch n); libllama splits it into n_ubatch pieces
    ctx = new_context(model, case, n + steps + 8, n, ubatch, 1, False)
    if not ctx:
        return {"id": case["id"], "error": "llama_init_from_model failed"}
    rng = random.Random(case["context"])
    try:
        prompt = [rng.randrange(vocab) for _ in range(n)]
        mem = llama_cpp.llama_get_memory(ctx)
        prefills = []
        # the fastest of a few: other work on the machine only slows a run
        for _ in range(case.get("prefill_reps", 3 if n <= 1024 else 2)):
            llama_cpp.llama_memory_clear(mem, True)
            t0 = time.perf_counter()
            decode(ctx, prompt, 0, ubatch)
            llama_cpp.llama_synchronize(ctx)
            prefills.append(time.perf_counter() - t0)
        decode(ctx, [rng.randrange(vocab)], n, 1)  # warm-up step
        steps_s = []
        for i in range(steps):
            t0 = time.perf_counter()
            decode(ctx, [rng.randrange(vocab)], n + 1 + i, 1)
            llama_cpp.llama_synchronize(ctx)
            steps_s.append(time.perf_counter() - t0)
        median = statistics.median(steps_s)
        fast = statistics.quantiles(steps_s, n=10)[0]  # the 10th percentile: steps other work did not slow
        return {
            "id": case["id"],
            "prefill_s": min(prefills),
            "prefill_tok_s": n / min(prefills),
            "prefill_runs_s": prefills,
            "decode_step_median_s": median,
            "decode_step_p10_s": fast,
            "decode_tok_s": 1.0 / fast,
            "decode_median_tok_s": 1.0 / median,
            "decode_mean_tok_s": steps / sum(steps_s),
            "n_ctx": llama_cpp.llama_n_ctx(ctx),
        }
    finally:
        llama_cpp.llama_free(ctx)


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    llama_cpp.llama_log_set(QUIET, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    results = []
    for name, path in job["models"].items():
        mparams = llama_cpp.llama_model_default_params()
        mparams.use_extra_bufts = False
        model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
        if not model:
            results += [{"id": c["id"], "error": f"could not load {path}"} for c in job["cases"] if c["model"] == name]
            continue
        try:
            vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
            results += [run_case(model, vocab, c) for c in job["cases"] if c["model"] == name]
        finally:
            llama_cpp.llama_model_free(model)
    print("\n" + json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
