"""This machine's RAM bandwidth, measured once by a short numpy copy and cached per host."""

from __future__ import annotations

import json
import os
import platform
import time
from functools import lru_cache
from pathlib import Path

from core.files import cache_dir, write_json_atomic

PROBE_BYTES = 256 * 1024 * 1024  # well past any L3, small enough to take ~0.1 s
REPEATS = 5


def cache_path() -> Path:
    return cache_dir() / "ram_bandwidth.json"


def _cpuinfo_fields(cpuinfo: str | None) -> dict[str, str] | None:
    """The first processor's block of /proc/cpuinfo (or of the text given) as fields; None where it can't be read."""
    try:
        text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    except OSError:
        return None
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU's model name; where a virtual machine hides the model number ('AMD EPYC', 'Intel(R) Xeon(R)
    Processor'), with its family, model and vector ISA appended: two VMs both named 'AMD EPYC' ran llama.cpp 3-4x
    apart per thread, and two of family 25, model 17 (Zen 4), one with AVX-512 and one without, ran its quantised
    prefill 1.6-2.5x apart (measurements/speed/llamacpp_cpu*.jsonl), so their calibrations and records must not
    share a name."""
    fields = _cpuinfo_fields(cpuinfo)
    name = (fields or {}).get("model name", "")
    if not fields or not name:
        return platform.processor()
    if not any(c.isdigit() for c in name) and "cpu family" in fields and "model" in fields:
        isa = ISA_NAMES.get(vector_isa(fields.get("flags", "")))
        return f"{name} (family {fields['cpu family']}, model {fields['model']}{f', {isa}' if isa else ''})"
    return name


def cpu_mhz(cpuinfo: str | None = None) -> float | None:
    """The clock /proc/cpuinfo gives for the first processor (in a VM, usually the host's nominal clock: 2,445 on this
    project's Zen 3 EPYC VM), or None: recorded beside each timed CPU, to check a per-CPU speed factor against."""
    try:
        return float((_cpuinfo_fields(cpuinfo) or {})["cpu MHz"])
    except (KeyError, ValueError):
        return None


ISA_NAMES = {"avx512": "AVX-512", "avx2": "AVX2"}


def vector_isa(flags: str) -> str:
    """'avx512' or 'avx2' from cpuinfo's flags, else '' (another ISA, or not known): llama.cpp's CPU kernels for
    quantised weights are built for the widest one the host has (GGML_NATIVE), and a hypervisor may hide AVX-512."""
    have = set(flags.split())
    return "avx512" if "avx512f" in have else "avx2" if "avx2" in have else ""


@lru_cache(maxsize=1)  # the flags do not change while the process runs; pages ask on every rerun
def host_isa() -> str:
    """This host's vector ISA (vector_isa of its cpuinfo flags)."""
    return vector_isa((_cpuinfo_fields(None) or {}).get("flags", ""))


def _host_key() -> str:
    return f"{platform.node()}|{cpu_name()}|{os.cpu_count()}"


def measure_ram_gb_s(nbytes: int = PROBE_BYTES, repeats: int = REPEATS) -> float:
    """Best of `repeats` copies of an nbytes array: bytes read + bytes written per second, in GB/s (10^9)."""
    import numpy as np  # only when measuring: importing core never pulls numpy in

    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in first
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best / 1e9


def ram_gb_s(refresh: bool = False) -> tuple[float, str]:
    """(GB/s, where the figure comes from): the cached measurement for this host, else a fresh one (then cached)."""
    path = cache_path()
    key = _host_key()
    if not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("host") == key and data.get("gb_s", 0) > 0:
                return float(data["gb_s"]), f"measured {data['time']} by a numpy copy ({path})"
        except (OSError, ValueError):
            pass
    gb_s = measure_ram_gb_s()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_json_atomic(path, {"host": key, "gb_s": gb_s, "time": stamp})  # a read-only home: measure again next time
    return gb_s, f"measured {stamp} by a numpy copy"
