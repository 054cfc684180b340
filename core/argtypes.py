"""argparse value types shared by every `python -m core` command.

Every number is refused at the parser unless it is finite and inside a range no real setting leaves: a 400-digit
count or an `inf` bandwidth would otherwise reach float arithmetic and end in an OverflowError, or print `Infinity`,
which is not JSON. The parser's message names the flag.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from core.errors import InputError
from core.units import digits_checked, parse_bytes, parse_tokens

MAX_COUNT = 1 << 40  # past any count of GPUs, requests or steps; float arithmetic stays exact far beyond it
MAX_MEMORY_BYTES = 1 << 50  # a pebibyte: past any one GPU's memory
MAX_RAM_GB_S = 100_000  # a memory bandwidth: HBM3e is about 5,000 GB/s


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 24 else repr(text[:21] + "...")


def _integer(text: str) -> int:
    try:
        digits_checked(text, text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not an integer") from None


def int_range(lo: int, hi: int, unit: str = "") -> Callable[[str], int]:
    """An argparse type: an integer from lo to hi inclusive."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < lo:
            raise argparse.ArgumentTypeError(
                f"must be positive, got {value:,}" if lo == 1 else f"must be {lo:,} or more, got {value:,}"
            )
        if value > hi:
            raise argparse.ArgumentTypeError(f"{value:,}{unit} is more than kvscope takes (at most {hi:,}{unit})")
        return value

    parse.__name__ = "integer"  # argparse names the type by it
    return parse


def float_range(lo: float, hi: float, unit: str = "", lo_open: bool = True, least: str = "") -> Callable[[str], float]:
    """An argparse type: a finite number above lo (or from lo, without `lo_open`; `least` words that bound) and at
    most hi."""

    def parse(text: str) -> float:
        if len(text) > 40:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is too long to be a number kvscope takes")
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {_shown(text)}")
        if lo >= 0 and value <= 0 and (lo_open or lo > 0):
            raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
        if value < lo or (lo_open and value == lo):
            bound = least or f"{'above' if lo_open else 'at least'} {lo:g}{unit}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value:g}{unit}")
        if value > hi:
            raise argparse.ArgumentTypeError(f"{value:g}{unit} is more than kvscope takes (at most {hi:g}{unit})")
        return value

    parse.__name__ = "number"
    return parse


positive_int = int_range(1, MAX_COUNT)
byte_count = int_range(1, MAX_MEMORY_BYTES, " B")
int32 = int_range(-(1 << 31), (1 << 31) - 1)  # llama.cpp reads -ngl and --n-cpu-moe with std::stoi
thread_count = int_range(1, 1 << 16)
finite_float = float_range(-math.inf, math.inf, lo_open=False)  # the range is checked where the value is used
# One GPU's memory in GiB: 1 MiB is far below any card, but keeps every byte count derived from it non-zero.
gpu_gib = float_range(1 / 1024, 100_000, " GiB", lo_open=False, least="at least 1 MiB (0.0009765625 GiB)")
gb_per_s = float_range(0, MAX_RAM_GB_S, " GB/s")
seconds = float_range(0, 7 * 86_400, " s")


def tokens(text: str) -> int:
    """A token count: 8192, 32k, 128K."""
    try:
        return parse_tokens(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def byte_size(text: str) -> int:
    """A size in bytes: 1073741824, 512MiB, 1.5GiB; at most a pebibyte."""
    try:
        value = parse_bytes(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if value > MAX_MEMORY_BYTES:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is more than kvscope takes (at most 1 PiB)")
    return value


def add_json_flag(p: argparse.ArgumentParser) -> None:
    """--json, which every command takes."""
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of the text report")


def format_name(text: str) -> str:
    """An argparse type: a weight format's name, not blank (blank read as "the checkpoint's", which leaving the flag
    out already says)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: name a format (e.g. bf16, Q4_K_M), or leave the flag out")
    return text


format_name.__name__ = "format"  # argparse names the type by it
