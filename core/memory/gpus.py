"""Accelerator cards: how many bytes a workload may use on each, and how fast it reads them."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from core.errors import InputError
from core.units import GIB, MIB

DATA = Path(__file__).resolve().parent / "data" / "gpus.csv"
UNIFIED_GPU_SHARE = 0.75  # macOS lets roughly 2/3–3/4 of RAM be GPU-wired by default (iogpu.wired_limit_mb)


@dataclass(frozen=True)
class Card:
    name: str
    vendor: str
    memory_bytes: int  # what the driver exposes to the GPU (unified: the GPU's share)
    bandwidth_gb_s: float | None
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None  # dense; None where the card has no FP8 tensor cores
    unified_memory: bool = False
    basis: str = ""  # where memory_bytes comes from, shown to the user

    @property
    def hopper(self) -> bool:
        """SM90 parts, where some engines pick other kernels (vLLM's FlashInfer GDN prefill)."""
        return any(tag in self.name for tag in ("H100", "H200", "GH200"))

    @classmethod
    def custom(cls, gib: float) -> Card:
        if not gib > 0:
            raise InputError(f"GPU memory must be positive, got {gib} GiB")
        if gib > 100_000:
            raise InputError(f"{gib} GiB per GPU is not a real card; give the memory of one GPU in GiB")
        return cls(f"{gib:g} GiB GPU", "custom", int(gib * GIB), None, basis=f"{gib:g} GiB as given")


def _card(row: dict[str, str]) -> Card:
    unified = row["unified_memory"] == "yes"
    if row["driver_mib"]:
        memory, basis = int(row["driver_mib"]) * MIB, f"{row['driver_mib']} MiB reported by the driver"
    elif row["memory_bytes"]:
        memory, basis = int(row["memory_bytes"]), "exact size from the vendor"
    else:
        memory, basis = int(float(row["memory_gib_marketed"]) * GIB), f"{row['memory_gib_marketed']} GiB marketed"
    if unified:
        memory = int(memory * UNIFIED_GPU_SHARE)
        basis += f"; {UNIFIED_GPU_SHARE:.0%} GPU share of unified memory"
    return Card(
        name=row["name"],
        vendor=row["vendor"],
        memory_bytes=memory,
        bandwidth_gb_s=float(row["bandwidth_gb_s"]) if row["bandwidth_gb_s"] else None,
        bf16_tflops=float(row["bf16_tflops"]) if row["bf16_tflops"] else None,
        fp8_tflops=float(row["fp8_tflops"]) if row["fp8_tflops"] else None,
        unified_memory=unified,
        basis=basis,
    )


@lru_cache(maxsize=1)
def cards() -> dict[str, Card]:
    with DATA.open(newline="", encoding="utf-8") as f:
        return {row["name"]: _card(row) for row in csv.DictReader(f)}


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower().replace("geforce", "").replace("nvidia", ""))


# Common short names → the row most people mean.
ALIASES = {
    "h100": "H100 80GB SXM5",
    "h200": "H200 141GB SXM",
    "b200": "B200 (HGX B200, per GPU)",
    "a100": "A100 80GB SXM4",
    "a10080gb": "A100 80GB SXM4",
    "a10040gb": "A100 40GB SXM4",
    "mi300x": "Instinct MI300X 192GB",
    "l40s": "L40S 48GB",
    "l4": "L4 24GB",
    "a10": "A10 24GB",
    # The plain desktop card, not its D / Ti / SUPER / Laptop GPU siblings that share the number.
    "rtx4090": "GeForce RTX 4090 24GB",
    "4090": "GeForce RTX 4090 24GB",
    "rtx4080": "GeForce RTX 4080 16GB",
    "4080": "GeForce RTX 4080 16GB",
    "rtx3090": "GeForce RTX 3090 24GB",
    "3090": "GeForce RTX 3090 24GB",
    "rtx3080": "GeForce RTX 3080 10GB",
    "3080": "GeForce RTX 3080 10GB",
    "rtx5070": "GeForce RTX 5070 12GB",
    "5070": "GeForce RTX 5070 12GB",
    "rtx4070ti": "GeForce RTX 4070 Ti 12GB",
    "4070ti": "GeForce RTX 4070 Ti 12GB",
    "l40": "L40 48GB",
    "a40": "A40 48GB",
    "rtx6000": "RTX 6000 Ada Generation 48GB",
}


def card_named(name: str) -> Card:
    """A card by name: exact, alias, or an unambiguous part of its name ('4090', 'rtx 3060')."""
    table = cards()
    if name in table:
        return table[name]
    key = _key(name)
    if not key:
        raise InputError("no card given; name one (e.g. 'RTX 4090', 'H100') or give the memory in GiB")
    if key in ALIASES:
        return table[ALIASES[key]]
    exact = [c for n, c in table.items() if _key(n) == key]
    matches = exact or [c for n, c in table.items() if key in _key(n)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise InputError(f"unknown card {name!r}; try e.g. 'RTX 4090', 'H100', 'A100 40GB', or give --gpu-mem-gib")
    names = ", ".join(c.name for c in matches[:8])
    raise InputError(f"card {name!r} is ambiguous: {names}; name one exactly")
