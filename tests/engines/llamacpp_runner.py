"""Ask the real libllama what its cache holds (run in the engines' venv).

Reads JSON from the file named by its argument (or stdin): {"models": {name: gguf path}, "cases": [{"id",
"model", "n_ctx", "n_seq_max", "n_ubatch", "n_batch", "type_k", "type_v", "flash_attn": "auto"|"on"|"off",
"swa_full", "kv_unified", "n_rs_seq"}]}. Each model is loaded once; each case creates a context, reads its memory
object and frees the context. Prints one JSON line: {"cases": [{"id", "memory": class name, "caches": {role:
{"k", "v", "total"} | {"r", "s", "p", "total"}}, "log": [...]}]}

The bytes come from the library's own accounting, called through the C++ symbols libllama exports
(`llama_kv_cache::size_k_bytes() const` etc., `this` as the first argument). The memory object's class is read from
its vtable: the word before the vtable's address points to the class's typeinfo, whose `_ZTI` symbol is exported.
The cache log lines are returned too, as a cross-check and for the cell counts.
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import llama_cpp

LIB = llama_cpp.llama_cpp._lib
TYPES = {
    "f16": llama_cpp.GGML_TYPE_F16,
    "q8_0": llama_cpp.GGML_TYPE_Q8_0,
    "q4_0": llama_cpp.GGML_TYPE_Q4_0,
    "f32": llama_cpp.GGML_TYPE_F32,
}
FLASH = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}
CLASSES = (
    "llama_kv_cache",
    "llama_kv_cache_iswa",
    "llama_memory_recurrent",
    "llama_memory_hybrid",
    "llama_memory_hybrid_iswa",
    "llama_kv_cache_dsa",
    "llama_kv_cache_dsa_iswa",
    "llama_kv_cache_msa",
    "llama_kv_cache_dsv4",
    "llama_memory_hybrid_idx",
)


def symbol_address(name: str) -> int:
    return ctypes.addressof(ctypes.c_char.in_dll(LIB, name))


def method(cls: str, name: str, restype):
    mangled = f"_ZNK{len(cls)}{cls}{len(name)}{name}Ev"
    fn = LIB[mangled]
    fn.restype = restype
    fn.argtypes = [ctypes.c_void_p]
    return fn


TYPEINFO = {symbol_address(f"_ZTI{len(c)}{c}"): c for c in CLASSES}
SIZE_T, PTR = ctypes.c_size_t, ctypes.c_void_p
KV = {
    "k": method("llama_kv_cache", "size_k_bytes", SIZE_T),
    "v": method("llama_kv_cache", "size_v_bytes", SIZE_T),
    "total": method("llama_kv_cache", "total_size", SIZE_T),
}
RS = {
    "r": method("llama_memory_recurrent", "size_r_bytes", SIZE_T),
    "s": method("llama_memory_recurrent", "size_s_bytes", SIZE_T),
    "p": method("llama_memory_recurrent", "size_p_bytes", SIZE_T),
    "total": method("llama_memory_recurrent", "total_size", SIZE_T),
}
ISWA = {"base": method("llama_kv_cache_iswa", "get_base", PTR), "swa": method("llama_kv_cache_iswa", "get_swa", PTR)}
HYBRID = {
    "attn": method("llama_memory_hybrid", "get_mem_attn", PTR),
    "recr": method("llama_memory_hybrid", "get_mem_recr", PTR),
}
HYBRID_ISWA = {
    "attn": method("llama_memory_hybrid_iswa", "get_mem_attn", PTR),
    "recr": method("llama_memory_hybrid_iswa", "get_mem_recr", PTR),
}

LOG: list[str] = []


@llama_cpp.llama_log_callback
def capture(level: int, text: bytes, user_data) -> None:
    LOG.append(text.decode("utf-8", "replace"))


def class_of(obj: int) -> str:
    vptr = ctypes.c_void_p.from_address(obj).value
    typeinfo = ctypes.c_void_p.from_address(vptr - ctypes.sizeof(ctypes.c_void_p)).value
    return TYPEINFO.get(typeinfo, f"unknown typeinfo {typeinfo:#x}")


def kv_sizes(obj: int) -> dict[str, int]:
    return {key: fn(obj) for key, fn in KV.items()}


def rs_sizes(obj: int) -> dict[str, int]:
    return {key: fn(obj) for key, fn in RS.items()}


def caches(mem: int) -> tuple[str, dict[str, dict[str, int]]]:
    cls = class_of(mem)
    if cls == "llama_kv_cache":
        return cls, {"kv": kv_sizes(mem)}
    if cls == "llama_kv_cache_iswa":
        return cls, {role: kv_sizes(get(mem)) for role, get in ISWA.items()}
    if cls == "llama_memory_recurrent":
        return cls, {"recr": rs_sizes(mem)}
    if cls == "llama_memory_hybrid":
        return cls, {"attn": kv_sizes(HYBRID["attn"](mem)), "recr": rs_sizes(HYBRID["recr"](mem))}
    if cls == "llama_memory_hybrid_iswa":
        attn = HYBRID_ISWA["attn"](mem)
        out = {f"attn_{role}": kv_sizes(get(attn)) for role, get in ISWA.items()}
        return cls, out | {"recr": rs_sizes(HYBRID_ISWA["recr"](mem))}
    raise SystemExit(f"no reader for memory class {cls}")


def cache_log(lines: list[str]) -> list[str]:
    keep = (
        "llama_kv_cache:",
        "llama_memory_recurrent:",
        "llama_kv_cache_iswa:",
        "llama_context: n_ctx",
        "llama_context: n_ubatch",
        "llama_context: n_seq_max",
        "llama_context: kv_unified",
        "n_ctx_seq",
    )
    return [line.rstrip() for line in "".join(lines).splitlines() if any(k in line for k in keep)]


def context_params(case: dict):
    """llama_context_params for a case: the fields it gives, the front ends' values for those it leaves out (f16
    cache, swa_full and kv_unified off: the library's own swa_full default is on; n_outputs_max 0, i.e. n_batch; no
    rollback snapshots), and one thread."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = case["n_ctx"]
    params.n_seq_max = case["n_seq_max"]
    params.n_ubatch = case["n_ubatch"]
    params.n_batch = case["n_batch"]
    params.type_k = TYPES[case.get("type_k", "f16")]
    params.type_v = TYPES[case.get("type_v", "f16")]
    params.flash_attn_type = FLASH[case["flash_attn"]]
    params.swa_full = case.get("swa_full", False)
    params.kv_unified = case.get("kv_unified", False)
    params.n_rs_seq = case.get("n_rs_seq", 0)
    params.n_outputs_max = case.get("n_outputs_max", 0)  # llama-server passes its slots
    params.n_threads = params.n_threads_batch = 1
    return params


def read_caches(ctx) -> dict:
    """What the context's memory object allocated: its class and each cache's K, V, R and S bytes."""
    cls, sizes = caches(llama_cpp.llama_get_memory(ctx))
    return {"memory": cls, "caches": sizes, "n_ctx": llama_cpp.llama_n_ctx(ctx), "log": cache_log(LOG)}


def in_context(model, case: dict, read, log: list[str]) -> dict:
    """The case's context, `read` (with the case's id), then freed; a context libllama refuses is the case's
    error, with the tail of `log`."""
    log.clear()
    ctx = llama_cpp.llama_init_from_model(model, context_params(case))
    if not ctx:
        return {"id": case["id"], "error": "llama_init_from_model failed", "log": "".join(log)[-3000:]}
    try:
        return {"id": case["id"], **read(ctx)}
    finally:
        llama_cpp.llama_free(ctx)


def run_models(job: dict, read, log: list[str]) -> list[dict]:
    """Load each of the job's models once and `read` a context of each of its cases; a model libllama cannot load
    fails its cases with the tail of `log` (what the caller's log callback collected)."""
    results = []
    for name, path in job["models"].items():
        mparams = llama_cpp.llama_model_default_params()
        # No CPU "extra" weight buffers (AMX, repacked): on a CPU with AMX, libllama 0.3.36 placed a DeepSeek-V3
        # op on no backend and aborted (GGML_ASSERT(*cur_backend_id != -1), ggml-backend.cpp:1294) while building
        # the context. Where weights live does not change what the caches and graph hold, which is what is asked.
        mparams.use_extra_bufts = False
        model = llama_cpp.llama_model_load_from_file(path.encode(), mparams)
        mine = [case for case in job["cases"] if case["model"] == name]
        if not model:
            error = f"libllama could not load {path}"
            results += [{"id": case["id"], "error": error, "log": "".join(log)[-3000:]} for case in mine]
            continue
        try:
            results += [in_context(model, case, read, log) for case in mine]
        finally:
            llama_cpp.llama_model_free(model)
    return results


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text() if len(sys.argv) > 1 else sys.stdin.read())
    llama_cpp.llama_log_set(capture, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    print(json.dumps({"cases": run_models(job, read_caches, LOG)}))


if __name__ == "__main__":
    main()
