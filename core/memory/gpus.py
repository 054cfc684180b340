"""Accelerator cards: how many bytes a workload may use on each, and how fast it reads them."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
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
    fp16_tflops: float | None = None  # dense FP16 matrix peak (FP32 accumulate where the vendor tells them apart)
    # vector FP32 peak: the timing peak where no 16-bit rate is usable (Pascal GP10x), on cards Vulkan runs without
    # matrix cores the base of their int8 dot-product rate, and SYCL's prompt GEMM (core.speed.groups.matmul_peak)
    fp32_tflops: float | None = None

    @property
    def hopper(self) -> bool:
        """SM90 parts, where some engines pick other kernels (vLLM's FlashInfer GDN prefill) and llama.cpp's own
        mma.sync kernels reach a smaller share of the listed peak (core.speed.groups.HOPPER_MMA_SYNC_SHARE)."""
        return any(tag in self.name for tag in ("H100", "H200", "GH200"))

    @property
    def ga100(self) -> bool:
        """GA100 parts (A100, A30): 2,048 dense FP16 FLOP per SM and clock, 4 times GA102's (the GeForce Ampere die),
        where llama.cpp's flash-attention prompt kernel reaches GA102's (core.speed.groups.GA102_FA_SHARE)."""
        return bool(re.search(r"\bA100\b|^A30 ", self.name))

    @property
    def dense_tflops(self) -> float | None:
        """The dense peak the speed model times matmuls and attention by: BF16 where the card has it, else FP16,
        else FP32 (Pascal GP10x: FP16 at 1/64 of the FP32 rate, which llama.cpp keeps off; it runs FP32 matmuls and
        dp4a int8 ones there, core.speed.groups.matmul_peak). Every listed card with both 16-bit peaks runs them at
        the same dense rate, and llama.cpp runs F16 and quantized weights as FP16 MMA or INT8 MMQ rather than BF16
        anyway; cards without BF16 units still have FP16 ones, which llama.cpp's CUDA/HIP kernels use
        (ggml-cuda/common.cuh fp16_mma_hardware_available from Volta, bf16_mma_hardware_available only from Ampere
        and RDNA3 @ 0c1e57098), and vLLM runs them in FP16 since BF16 needs compute capability 8.0
        (vllm/platforms/cuda.py check_if_supports_dtype @ 0.32)."""
        return self.bf16_tflops or self.fp16_tflops or self.fp32_tflops

    @property
    def fp32_only(self) -> bool:
        """Timed by its FP32 peak: no 16-bit rate an engine runs at (Pascal GP10x)."""
        return not (self.bf16_tflops or self.fp16_tflops) and bool(self.fp32_tflops)

    def timing_figures(self) -> tuple[float, float]:
        """Bandwidth (GB/s) and dense peak (TFLOPS) to time the card by; an InputError names what is missing."""
        bandwidth, peak = self.bandwidth_gb_s, self.dense_tflops
        if bandwidth and peak:
            return bandwidth, peak
        missing = [("bandwidth in GB/s", "--gpu-gbs")] if not bandwidth else []
        missing += [] if peak else [("dense 16-bit peak in TFLOPS", "--gpu-tflops")]
        raise InputError(
            f"{self.name}: no bandwidth or peak figure to time it by: give its {' and '.join(m for m, _ in missing)} "
            f"({' and '.join(f for _, f in missing)}; in the app, the custom card's boxes), choose a listed card, or "
            "run on the CPU"
        )

    @classmethod
    def custom(cls, gib: float, gb_s: float | None = None, tflops: float | None = None) -> Card:
        """A card by its figures: memory in GiB, and optionally bandwidth (GB/s) and dense 16-bit TFLOPS to time
        it by."""
        if not gib > 0:
            raise InputError(f"GPU memory must be positive, got {gib} GiB")
        if gib > 100_000:
            raise InputError(f"{gib} GiB per GPU is not a real card; give the memory of one GPU in GiB")
        card = cls(f"{gib:g} GiB GPU", "custom", int(gib * GIB), None, basis=f"{gib:g} GiB as given")
        return with_figures(card, gb_s, tflops)


MAX_GB_S = 100_000  # far past any memory (HBM3e is about 8,000 GB/s per GPU)
MAX_TFLOPS = 100_000  # far past any one GPU's dense 16-bit peak (B200: 2,250)


def checked_figures(gb_s: float | None, tflops: float | None) -> dict[str, float]:
    """The given speed figures as Card fields; a non-positive, infinite or absurd one is refused."""
    out = {}
    for field, flag, value, top in (
        ("bandwidth_gb_s", "--gpu-gbs (GB/s)", gb_s, MAX_GB_S),
        ("fp16_tflops", "--gpu-tflops (dense 16-bit TFLOPS)", tflops, MAX_TFLOPS),
    ):
        if value is None:
            continue
        if not 0 < value <= top:  # NaN fails too
            raise InputError(f"{flag} must be positive and at most {top:,}, got {value}")
        out[field] = float(value)
    return out


def with_figures(card: Card, gb_s: float | None, tflops: float | None) -> Card:
    """A listed card with its bandwidth and/or dense peak replaced by the given ones (the one that times it)."""
    speed = checked_figures(gb_s, tflops)
    if "fp16_tflops" in speed:  # the given peak is the one dense_tflops returns, whatever the card's BF16 was
        speed["bf16_tflops"] = speed["fp32_tflops"] = None
    return replace(card, **speed) if speed else card


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
        fp16_tflops=float(row["fp16_tflops"]) if row["fp16_tflops"] else None,
        fp32_tflops=float(row["fp32_tflops"]) if row["fp32_tflops"] else None,
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
    "gtx1080": "GeForce GTX 1080 8GB",
    "1080": "GeForce GTX 1080 8GB",
    "gtx1070": "GeForce GTX 1070 8GB",
    "1070": "GeForce GTX 1070 8GB",
    "p4": "Tesla P4 8GB",
    "teslap4": "Tesla P4 8GB",
    "v100": "V100 16GB SXM2",  # the cloud V100 (AWS p3, GCP, Colab)
    "v100s": "V100S 32GB PCIe",
    "gb10": "DGX Spark (GB10) 128GB",  # "gb10" alone also matches Apple's "10C GPU" rows
    # the names torch and nvidia-smi / rocm-smi give these cards (a probe looks its GPU up by them)
    "h10080gbhbm3": "H100 80GB SXM5",
    "teslat4": "T4 16GB",
    "amdinstinctmi300x": "Instinct MI300X 192GB",
    "amdinstinctmi325x": "Instinct MI325X 256GB",
    "dgxspark": "DGX Spark (GB10) 128GB",
}


def _by_words(name: str, table: dict[str, Card]) -> list[Card]:
    """The cards whose name holds each word of `name` in one of its words, in any order: 'H100 PCIe' is
    'H100 80GB PCIe', whose key does not hold 'h100pcie' whole."""
    words = [_key(w) for w in re.split(r"[\s_/()-]+", name) if _key(w)]
    return [c for n, c in table.items() if all(any(w in _key(part) for part in n.split()) for w in words)]


def _starts_a_word(key: str, name: str) -> bool:
    """`key` is in the card's name from the start of one of its words on: 'rtx3060' in 'GeForce RTX 3060 12GB', but
    not 't4' in 'Radeon PRO W7900 Dual Slot 48GB' (the end of 'Slot' and the start of '48GB')."""
    words = name.split()
    return any(_key(" ".join(words[i:])).startswith(key) for i in range(len(words)))


def _whole_words(key: str, name: str) -> bool:
    """`key` is a run of whole words of the card's name: 'arca770' in 'Intel Arc A770 16GB', not in 'Intel Arc A770M
    16GB' (where it stops inside 'A770M')."""
    words = name.split()
    return any(_key(" ".join(words[i:j])) == key for i in range(len(words)) for j in range(i + 1, len(words) + 1))


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
    matches = exact or [c for n, c in table.items() if _starts_a_word(key, n)] or _by_words(name, table)
    # of several, the one card whose name holds it as whole words: 'Arc A770' is the A770, not the A770M, and 'RX 7900
    # XT' not the XTX; only for a name with a model number ('SXM' or 'D' alone stays ambiguous)
    whole = [c for c in matches if _whole_words(key, c.name)] if any(ch.isdigit() for ch in key) else []
    if len(matches) == 1:
        return matches[0]
    if len(whole) == 1:
        return whole[0]
    if not matches:
        raise InputError(
            f"unknown card {name!r}; try e.g. 'RTX 4090', 'H100', 'A100 40GB', or give its memory (--gpu-mem-gib; in "
            "the app, the custom card)"
        )
    names = ", ".join(c.name for c in matches[:8])
    raise InputError(f"card {name!r} is ambiguous: {names}; name one exactly")
