"""Storage types of cached tensors, as whole bytes per block of elements."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import InputError


@dataclass(frozen=True)
class CacheDtype:
    """A storage type: `block_bytes` bytes hold `block_elems` elements (block-quantised types have blocks > 1)."""

    name: str
    block_bytes: int
    block_elems: int = 1

    def bytes_for(self, elements: int) -> int:
        """Bytes for one row of `elements` values; a partial block still costs a whole block."""
        blocks = -(-elements // self.block_elems)
        return blocks * self.block_bytes

    @property
    def bits(self) -> float:
        return 8 * self.block_bytes / self.block_elems


FP32 = CacheDtype("fp32", 4)
BF16 = CacheDtype("bf16", 2)
FP16 = CacheDtype("fp16", 2)
FP8_E4M3 = CacheDtype("fp8_e4m3", 1)
FP8_E5M2 = CacheDtype("fp8_e5m2", 1)
INT8 = CacheDtype("int8", 1)
# llama.cpp block types (ggml-common.h): q8_0 = fp16 scale + 32 int8; q4_0 = fp16 scale + 16 bytes of nibbles.
Q8_0 = CacheDtype("q8_0", 34, 32)
Q4_0 = CacheDtype("q4_0", 18, 32)
Q4_1 = CacheDtype("q4_1", 20, 32)
Q5_0 = CacheDtype("q5_0", 22, 32)
Q5_1 = CacheDtype("q5_1", 24, 32)
IQ4_NL = CacheDtype("iq4_nl", 18, 32)

_ALL = (FP32, BF16, FP16, FP8_E4M3, FP8_E5M2, INT8, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL)
_ALIASES = {
    "float32": FP32,
    "f32": FP32,
    "bfloat16": BF16,
    "float16": FP16,
    "f16": FP16,
    "half": FP16,
    "fp8": FP8_E4M3,
    "fp8_e4m3fn": FP8_E4M3,
    "float8_e4m3fn": FP8_E4M3,
    "float8_e5m2": FP8_E5M2,
}
BY_NAME: dict[str, CacheDtype] = {d.name: d for d in _ALL} | _ALIASES


def dtype_named(name: str) -> CacheDtype:
    """Look a storage type up by its kvscope name or its torch/config spelling."""
    key = str(name).strip().lower().removeprefix("torch.")
    try:
        return BY_NAME[key]
    except KeyError:
        known = ", ".join(d.name for d in _ALL)
        raise InputError(f"unknown dtype {name!r}; use one of: {known}") from None
