"""Run llama.cpp's own --fit (common_fit_params in libllama-common, built from the same sdist as libllama) on tiny
GGUFs, in the engines' venv, and report what it did with what it measured.

This libllama has only the CPU backend, so the fit finds no device (common/fit.cpp: nd == 0). It then measures host
memory (model, context and compute buffers) against the host's total less the margin, and after step 2, the context,
it gives up ("was unable to fit model into system memory by reducing context") unless the context alone made the
model fit. Steps 3-4 (-ngl, experts in RAM) need a device and cannot run here. A pretended memory X is the margin
total - X.

Reads JSON from the file named by its argument: {"cases": [{"id", "gguf", "n_seq_max", "kv_unified", "n_ctx_min",
"n_max", "n_min", "fraction": [num, den]}]}. Per case it measures the host projection at n_max and n_min with
common_get_device_memory_data (the fit's own dry run), pretends target = used_min + (used_max - used_min) * num / den,
runs common_fit_params with -c 0 and prints, on its last line, {"cases": [{"id", "used_max", "used_min", "target",
"status", "n_ctx", "devices"}]} (status: 0 success, 1 failure, 2 error; n_ctx: what the fit left in the context
parameters).
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import llama_cpp
from llama_cpp import llama_cpp as L

COMMON = ctypes.CDLL(str(Path(llama_cpp.__file__).parent.parent / "lib" / "libllama-common.so"), ctypes.RTLD_GLOBAL)
LOG_ERROR = 4  # ggml_log_level GGML_LOG_LEVEL_ERROR: the fit's dry runs stay quiet

# common/fit.h; C++ names, so looked up mangled (the Itanium ABI: a returned std::vector comes back through a hidden
# first pointer argument)
FIT = COMMON[
    "_Z17common_fit_paramsPKcP18llama_model_paramsP20llama_context_paramsPfP32llama_model_tensor_buft_override"
    "PmjPK22common_fit_extra_model14ggml_log_level"
]
FIT.restype = ctypes.c_int
FIT.argtypes = [
    ctypes.c_char_p,
    ctypes.POINTER(L.llama_model_params),
    ctypes.POINTER(L.llama_context_params),
    ctypes.c_void_p,  # float * tensor_split
    ctypes.c_void_p,  # llama_model_tensor_buft_override * (pattern, buft) pairs
    ctypes.POINTER(ctypes.c_size_t),  # margins
    ctypes.c_uint32,  # n_ctx_min
    ctypes.c_void_p,  # const common_fit_extra_model *
    ctypes.c_int,
]
MEMORY = COMMON[
    "_Z29common_get_device_memory_dataPKcPK18llama_model_paramsPK20llama_context_paramsRSt6vectorIP19"
    "ggml_backend_deviceSaIS9_EERjSD_SD_14ggml_log_level"
]
MEMORY.restype = None
MEMORY.argtypes = [
    ctypes.c_void_p,  # the returned std::vector<common_device_memory_data>
    ctypes.c_char_p,
    ctypes.POINTER(L.llama_model_params),
    ctypes.POINTER(L.llama_context_params),
    ctypes.c_void_p,  # std::vector<ggml_backend_dev_t> &
    ctypes.POINTER(ctypes.c_uint32),
    ctypes.POINTER(ctypes.c_uint32),
    ctypes.POINTER(ctypes.c_uint32),
    ctypes.c_int,
]


class DeviceMemory(ctypes.Structure):
    """common_device_memory_data; the last of the vector is the host."""

    _fields_ = [
        ("total", ctypes.c_int64),
        ("free", ctypes.c_int64),
        ("model", ctypes.c_size_t),
        ("context", ctypes.c_size_t),
        ("compute", ctypes.c_size_t),
    ]


def params(case: dict, n_ctx: int) -> tuple[L.llama_model_params, L.llama_context_params]:
    mparams = L.llama_model_default_params()
    # as tests/engines/llamacpp_runner.py: on an AMX CPU libllama aborts scheduling DeepSeek-V3 with the CPU's extra
    # buffer types (GGML_ASSERT(*cur_backend_id != -1)); without them every buffer is plain host memory
    mparams.use_extra_bufts = False
    cparams = L.llama_context_default_params()
    cparams.n_ctx, cparams.n_seq_max, cparams.kv_unified = n_ctx, case["n_seq_max"], case["kv_unified"]
    return mparams, cparams


def host(case: dict, n_ctx: int) -> tuple[int, int, int]:
    """(devices, host total, host bytes the dry run projects) at `n_ctx`."""
    mparams, cparams = params(case, n_ctx)
    vector = (ctypes.c_void_p * 3)()  # begin, end, capacity
    devices = (ctypes.c_void_p * 3)()
    counts = [ctypes.c_uint32() for _ in range(3)]
    MEMORY(vector, case["gguf"].encode(), mparams, cparams, devices, *counts, LOG_ERROR)
    size = ctypes.sizeof(DeviceMemory)
    rows = [DeviceMemory.from_address(vector[0] + i * size) for i in range((vector[1] - vector[0]) // size)]
    last = rows[-1]
    return len(rows) - 1, last.total, last.model + last.context + last.compute


def run(case: dict) -> dict:
    devices, total, used_max = host(case, case["n_max"])
    _, _, used_min = host(case, case["n_min"])
    num, den = case["fraction"]
    target = used_min + (used_max - used_min) * num // den
    mparams, cparams = params(case, 0)  # -c 0: the fit chooses
    slots = L.llama_max_devices()
    split = (ctypes.c_float * slots)()
    overrides = (ctypes.c_void_p * (2 * L.llama_max_tensor_buft_overrides()))()
    margins = (ctypes.c_size_t * slots)(*([total - target] * slots))
    status = FIT(case["gguf"].encode(), mparams, cparams, split, overrides, margins, case["n_ctx_min"], None, LOG_ERROR)
    return {
        "id": case["id"],
        "devices": devices,
        "used_max": used_max,
        "used_min": used_min,
        "target": target,
        "status": status,
        "n_ctx": cparams.n_ctx,
    }


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    L.llama_backend_init()
    print("\n" + json.dumps({"cases": [run(case) for case in job["cases"]]}))


if __name__ == "__main__":
    main()
