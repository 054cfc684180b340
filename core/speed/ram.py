"""This machine's RAM bandwidth, measured once by a short numpy copy and cached per host."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.files import cache_dir, write_json_atomic

PROBE_BYTES = 256 * 1024 * 1024  # past a desktop's L3, small enough to take ~0.1 s
# every core copying: a server's L3 can hold the probe (this project's 2-vCPU Xeon VM sees 480 MB of it), so the probe
# grows with the cores, 256 MB per 8, to this
MAX_PROBE_BYTES = 1024 * 1024 * 1024
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


def measure_ram_gb_s(nbytes: int = PROBE_BYTES, repeats: int = REPEATS, threads: int = 1) -> float:
    """Best of `repeats` copies of an nbytes array split over `threads` threads: bytes read + bytes written per
    second, in GB/s (10^9). numpy lets go of the GIL while it copies a slice this large, so the threads copy at once."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np  # only when measuring: importing core never pulls numpy in

    src = np.ones(nbytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)  # fault the pages in first
    n = src.size
    parts = [slice(n * i // threads, n * (i + 1) // threads) for i in range(threads)]
    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            t = time.perf_counter()
            list(pool.map(lambda part: np.copyto(dst[part], src[part]), parts))
            best = min(best, time.perf_counter() - t)
    return 2 * src.nbytes / best / 1e9


@dataclass(frozen=True)
class RamBandwidth:
    """This host's RAM copy rate with every core copying, and with one: a pass on T threads streams RAM at no more
    than T times one thread's rate (one core of a server reaches a fraction of its sockets' bandwidth: the 16-thread
    CPU of this project's device runs decoded llama 7B Q4_0 at 76 GB/s where one thread copied 19 GB/s,
    measurements/speed/llamacpp_device.jsonl)."""

    gb_s: float  # every core
    thread_gb_s: float  # one thread
    cores: int
    source: str


def ram_bandwidth(refresh: bool = False) -> RamBandwidth:
    """The cached measurement for this host (every core and one thread), else a fresh one (then cached)."""
    path = cache_path()
    key = _host_key()
    if not refresh:
        try:
            data = json.loads(path.read_text())
            if data.get("host") == key and data.get("gb_s", 0) > 0 and data.get("thread_gb_s", 0) > 0:
                # no path: the Ollama page shows this source in the browser, and a link never names the server's files
                source = f"measured {data['time']} by a numpy copy on {data['cores']} threads, cached"
                return RamBandwidth(float(data["gb_s"]), float(data["thread_gb_s"]), int(data["cores"]), source)
        except (OSError, ValueError, KeyError, TypeError):
            pass
    cores = os.cpu_count() or 1
    one = measure_ram_gb_s()
    probe = min(MAX_PROBE_BYTES, PROBE_BYTES * max(1, cores // 8))
    every = measure_ram_gb_s(probe, threads=cores) if cores > 1 else one
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # a read-only home: measure again next time
    write_json_atomic(path, {"host": key, "gb_s": every, "thread_gb_s": one, "cores": cores, "time": stamp})
    return RamBandwidth(every, one, cores, f"measured {stamp} by a numpy copy on {cores} threads")


def ram_gb_s(refresh: bool = False) -> tuple[float, str]:
    """(GB/s with every core copying, where the figure comes from)."""
    ram = ram_bandwidth(refresh)
    return ram.gb_s, ram.source
