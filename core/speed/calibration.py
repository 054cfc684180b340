"""This host's measured CPU matmul rates per weight format (`python -m core calibrate`), kept per host in kvscope's
cache dir and used by every CPU speed figure on that host.

A rate is effective GFLOP/s per thread: a decode step's (or a prefill's) matmul FLOPs ÷ (threads × the seconds
llama.cpp took) on a random-weight model past the CPU's caches, so it carries the kernel's dequantisation cost and
its memory traffic; kvscope's decode roofline then reads max(bytes ÷ bandwidth, FLOPs ÷ rate) with it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError
from core.files import cache_dir, open_lock, write_json_atomic
from core.speed.groups import format_family
from core.speed.ram import cpu_name

FILE = "calibration.json"


def host_key() -> str:
    """CPU model and core count: a calibration holds for every machine with the same CPU and cores."""
    return f"{cpu_name()} | {os.cpu_count()} cores"


def _key(fmt: str) -> str:
    return fmt.strip().lower().replace("-", "_")


@dataclass(frozen=True)
class Calibration:
    host: str
    time: str  # UTC, ISO 8601
    method: str  # "llama.cpp <version> …" or "numpy …"
    ram_gb_s: float
    threads: int
    rates: tuple[tuple[str, float | None, float | None], ...]  # (format, decode, prefill) GFLOP/s per thread
    # (head_dim, decode, prefill, cache) per thread per head width, from a deeper prompt: attention GFLOP/s and the
    # decode cache's streaming GB/s (None: not measured; the fitted rate, or the RAM bandwidth, then)
    attention: tuple[tuple[int, float | None, float | None, float | None], ...] = ()
    # `rates` timed again with one thread (empty: calibrated with one thread, or before this was timed). A decode step
    # that is memory-bound at every thread gives a rate per thread that is the memory's share, not the kernel's: on a
    # Zen 4 the F16 step ran 23.5 GFLOP/s at 1 thread and 14.0 per thread at 2, and 1-thread figures read 33-46 % slow
    single: tuple[tuple[str, float | None, float | None], ...] = ()
    ram_thread_gb_s: float = 0.0  # one thread's RAM copy rate (0: calibrated before 2026-12-05, which copied with one)
    # the commit of the kvscope that timed it, as a probe records its own (core.probe.runner.kvscope_revision): what
    # it times changes between commits. None: calibrated before 2026-12-06, or from a copy outside git
    kvscope: str | None = None

    @property
    def label(self) -> str:
        return f"calibrated on this host at {self.time} ({self.method})"

    def rate(self, fmt: str, prefill: bool, threads: int | None = None) -> float | None:
        """The format's measured rate at `threads` (default the calibration's): the one-thread and the all-thread
        rates where those were timed, linear in the thread count between them; else the median of its family's;
        None if neither was measured."""
        full = self._rate(self.rates, fmt, prefill)
        one = self._rate(self.single, fmt, prefill)
        if threads is None or threads >= self.threads or one is None or full is None:
            return full
        return one + (full - one) * (max(threads, 1) - 1) / (self.threads - 1)

    @staticmethod
    def _rate(rates: tuple, fmt: str, prefill: bool) -> float | None:
        i = 2 if prefill else 1
        exact = [r[i] for r in rates if _key(r[0]) == _key(fmt) and r[i]]
        if exact:
            return exact[0]
        family = sorted(r[i] for r in rates if format_family(r[0]) == format_family(fmt) and r[i])
        return family[len(family) // 2] if family else None

    def _nearest(self, i: int, head_dim: int) -> float | None:
        """Field i measured at the head width nearest `head_dim` (by ratio: llama.cpp's CPU attention runs the
        head's dot products as vectors of that width); None if none was measured."""
        measured = [r for r in self.attention if r[i]]
        if not measured:
            return None
        return min(measured, key=lambda r: abs(math.log(r[0] / max(1, head_dim))))[i]

    def attention_rate(self, prefill: bool, head_dim: int) -> float | None:
        return self._nearest(2 if prefill else 1, head_dim)

    def cache_rate(self, head_dim: int) -> float | None:
        """GB/s per thread a decode step streams the attention cache at (K/V rows of this width)."""
        return self._nearest(3, head_dim)

    def record(self) -> dict:
        return {
            "host": self.host, "time": self.time, "method": self.method, "ram_gb_s": self.ram_gb_s,
            "threads": self.threads, "rates": [list(r) for r in self.rates],
            "attention": [list(a) for a in self.attention], "single": [list(r) for r in self.single],
            "ram_thread_gb_s": self.ram_thread_gb_s, "kvscope": self.kvscope,
        }  # fmt: skip

    @classmethod
    def of(cls, d: dict) -> Calibration:
        """A stored record back; ValueError (naming the field) when one is missing or not the number it must be: a
        file edited by hand, or damaged, would otherwise reach the speed arithmetic as text or NaN."""
        try:
            rates = tuple((str(f), _rate(dec), _rate(pre)) for f, dec, pre in d["rates"])
            # calibrations stored before attention was timed per head width lack it (the fitted rate serves them),
            # and before the cache's rate was timed apart from the FLOPs' they lack its fourth field
            raw = d.get("attention") or ()
            attention = tuple(
                (_count(a[0], "head width"), _rate(a[1]), _rate(a[2]), _rate(a[3]) if len(a) == 4 else None)
                for a in raw
                if isinstance(a, list | tuple) and len(a) in (3, 4)
            )
            single = tuple((str(f), _rate(dec), _rate(pre)) for f, dec, pre in d.get("single") or ())  # 2026-12-03
            # calibrations before 2026-12-05 copied with one thread: their figure is that thread's and the machine's
            one = _rate(d.get("ram_thread_gb_s")) or 0.0
            ram = _rate(d["ram_gb_s"])
            if not ram:
                raise ValueError(f"ram_gb_s is {d['ram_gb_s']!r}, not a positive number")
            texts = [d[k] for k in ("host", "time", "method")]
            if not all(isinstance(t, str) for t in texts):
                raise ValueError(f"host, time and method must be text, got {texts!r}")
            kvscope = d.get("kvscope")  # absent before 2026-12-06
            if not isinstance(kvscope, str | None):
                raise ValueError(f"kvscope is {kvscope!r}, not a commit")
            return cls(*texts, ram, _count(d["threads"], "threads"), rates, attention, single, one, kvscope)
        except KeyError as err:
            raise ValueError(f"no {err.args[0]!r} field") from None
        except TypeError as err:  # a field of the wrong shape (a number where a list of rates belongs)
            raise ValueError(f"a field has the wrong shape ({err})") from None


def _rate(x: object) -> float | None:
    """A stored rate: a finite number ≥ 0, or None (not measured)."""
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x < 0:
        raise ValueError(f"a rate is {x!r}, not a number ≥ 0")
    return x


def _count(x: object, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x <= 0:
        raise ValueError(f"{what} is {x!r}, not a positive whole number")
    return x


def path() -> Path:
    return cache_dir() / FILE


def load(host: str | None = None) -> Calibration | None:
    """The stored calibration of this host (or `host`), None when it was never calibrated or cannot be read."""
    return load_checked(host)[0]


def load_checked(host: str | None = None) -> tuple[Calibration | None, str | None]:
    """(this host's calibration or None, why a stored one cannot be used or None): a damaged file or entry is
    said, not taken for "never calibrated"."""
    data, problem = _read(path())
    entry = data.get("hosts", {}).get(host or host_key())
    if problem or entry is None:
        return None, problem
    try:
        if not isinstance(entry, dict):
            raise ValueError(f"a {type(entry).__name__}, not an object")
        return Calibration.of(entry), None
    except ValueError as err:
        return None, f"this host's entry in {path()} cannot be read ({err}); calibrate again to replace it"


def _read(p: Path) -> tuple[dict, str | None]:
    """(the file's data, {} if none or unreadable; why it is unreadable, None if it is fine or absent)."""
    try:
        data = json.loads(p.read_bytes())
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError, RecursionError) as err:  # ValueError: not JSON, or not UTF-8
        return {}, f"{p} cannot be read ({err}); calibrate again to replace it"
    if not isinstance(data, dict) or not isinstance(data.get("hosts", {}), dict):
        return {}, f'{p} is not a calibration file (no "hosts" object); calibrate again to replace it'
    return data, None


STORED_WHERE = "the calibration is stored"  # open_lock's words for kvscope's cache folder


@contextlib.contextmanager
def _locked(p: Path) -> Iterator[None]:
    """An exclusive flock beside the file: two calibrations storing at once (the CLI and the app, or two hosts
    sharing a home directory) each read the other's entry before adding theirs, so neither is lost."""
    fd = open_lock(p.with_name(p.name + ".lock"), STORED_WHERE, "KVSCOPE_CACHE")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def store(cal: Calibration) -> Path:
    """Add or replace this host's entry, keeping other hosts' (a shared home directory serves several). A file
    that cannot be read is kept beside the new one (…json.unreadable-<time>), not written over."""
    p = path()
    with _locked(p):
        data, problem = _read(p)
        if problem:
            with contextlib.suppress(OSError):
                os.replace(p, p.with_name(f"{p.name}.unreadable-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"))
        data.setdefault("hosts", {})[cal.host] = cal.record()
        if not write_json_atomic(p, data):  # through a rename: an interrupted write never leaves half a file
            raise InputError(f"cannot write the calibration to {p}; set KVSCOPE_CACHE to a writable folder")
    return p
