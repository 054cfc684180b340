"""Exact weight bytes from real files, to replace the estimate when a checkpoint is at hand.

- safetensors (a file, or a folder of shards): each tensor's byte range from the file header.
- GGUF: each tensor's stored size from the file's tensor table (read here, every declared count checked against the
  file's size; the `gguf` package gives the block sizes of each ggml type; no weights are loaded).
- A Hugging Face repo: the safetensors headers through `huggingface_hub.get_safetensors_metadata` (a few KB per
  shard, never the weights; needs the Hub unless the shards are in the local cache).

Tensors are attributed to layers by name (`layers.N.` in transformers checkpoints, `blk.N.` in GGUF), so llama.cpp's
partial offload can use exact per-layer sizes too.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from core.errors import InputError
from core.files import open_regular

_LAYER = re.compile(r"(?:^|\.)(?:layers|blk|h|block)\.(\d+)\.")
_EMBEDDING = ("embed_tokens", "token_embd", "wte.", "word_embeddings")


@dataclass(frozen=True)
class WeightFile:
    source: str
    kind: str  # "safetensors" | "gguf" | "hub"
    total_bytes: int
    layer_bytes: tuple[tuple[int, int], ...]  # (layer index, bytes), sorted
    embedding_bytes: int
    other_bytes: int  # outside any layer and not the embedding: output head, final norm

    def bytes_on_gpu(self, layers: range, output: bool) -> int:
        """The decoder layers in `layers` and, with `output`, the output head; never the embedding."""
        return sum(b for i, b in self.layer_bytes if i in layers) + (self.other_bytes if output else 0)


def _summarise(source: str, kind: str, sizes: dict[str, int]) -> WeightFile:
    per_layer: dict[int, int] = {}
    embedding = other = 0
    for name, size in sizes.items():
        match = _LAYER.search(name)
        if match:
            per_layer[int(match.group(1))] = per_layer.get(int(match.group(1)), 0) + size
        elif any(key in name for key in _EMBEDDING):
            embedding += size
        else:
            other += size
    return WeightFile(source, kind, sum(sizes.values()), tuple(sorted(per_layer.items())), embedding, other)


MAX_SAFETENSORS_HEADER = 100 << 20  # the safetensors library's own limit (MAX_HEADER_SIZE)


def _span(origin: str, name: str, offsets: Any, data_bytes: int | None) -> int:
    """A tensor's size from its [begin, end) byte range, checked: two integers, in order, inside the data."""
    if not (
        isinstance(offsets, list | tuple)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise InputError(f"{origin}: tensor {name[:80]!r} has no [begin, end] data_offsets of two integers")
    begin, end = offsets
    if not 0 <= begin <= end or (data_bytes is not None and end > data_bytes):
        where = f" in its {data_bytes:,} data bytes" if data_bytes is not None else ""
        raise InputError(f"{origin}: tensor {name[:80]!r} has data_offsets {_short(offsets)} that do not fit{where}")
    return end - begin


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _safetensors_header(path: Path) -> dict[str, int]:
    f, size = open_regular(path, "a .safetensors file")
    with f:
        raw = f.read(8)
        if len(raw) != 8:
            raise InputError(f"{path} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_SAFETENSORS_HEADER, size - 8):
            raise InputError(f"{path}: safetensors header of {length:,} bytes is not plausible; is the file damaged?")
        try:
            header = json.loads(f.read(length))
        except RecursionError:
            raise InputError(f"{path}: the safetensors header is nested too deeply") from None
        except ValueError as err:  # bad JSON, not UTF-8, or a number of 4,300+ digits (which int() refuses)
            reason = "a number with too many digits" if "digits" in str(err) else str(err)[:80]
            raise InputError(f"{path} has no readable safetensors header ({reason})") from None
    if not isinstance(header, dict):
        raise InputError(f"{path}: the safetensors header is a JSON {type(header).__name__}, not an object")
    data_bytes = size - 8 - length
    sizes = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        sizes[name] = _span(str(path), name, offsets, data_bytes)
    return sizes


def read_safetensors(path: Path) -> WeightFile:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"no .safetensors files in {path}")
    sizes: dict[str, int] = {}
    for file in files:
        sizes |= _safetensors_header(file)
    return _summarise(str(path), "safetensors", sizes)


# GGUF (ggml/docs/gguf.md): magic, version, tensor count, key count, the keys, the tensor table, aligned data.
_GGUF_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # value type → bytes
_GGUF_STRING, _GGUF_ARRAY, _GGUF_UINT32 = 8, 9, 4
_GGUF_MAX_KEYS = 1 << 16  # real files carry a few dozen
_GGUF_MAX_TENSORS = 1 << 20  # DeepSeek-V3 has under 2,000
_GGUF_MAX_DIMS = 4  # GGML_MAX_DIMS
_GGUF_MAX_NESTING = 4
_GGUF_MAX_LIST = 1 << 24  # strings or arrays in one array: a real vocabulary or merge list is under a million


class _GGUFHeader:
    """Walks a GGUF header with every declared count and length checked against the bytes left in the file before
    anything is read or skipped: a hostile count is an InputError, never an allocation or a long loop."""

    def __init__(self, f: BinaryIO, size: int, path: Path):
        self.f, self.size, self.path, self.order = f, size, path, "<"

    def left(self) -> int:
        return self.size - self.f.tell()

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.path} is not a readable GGUF file ({what})")

    def need(self, n: int, what: str) -> None:
        if n > self.left():
            raise self.fail(f"{what} runs past the end of the file")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        return self.f.read(n)

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.f.seek(n, 1)

    def uint(self, size: int, what: str) -> int:
        return int.from_bytes(self.take(size, what), "little" if self.order == "<" else "big")

    def string(self, what: str) -> bytes:
        return self.take(self.uint(8, what), what)

    def count(self, what: str, least_bytes: int, most: int) -> int:
        """A declared number of items, each at least `least_bytes` long: no more than the file could hold."""
        n = self.uint(8, what)
        if n > most or n * least_bytes > self.left():
            raise self.fail(f"it declares {n:,} {what}, more than the file's {self.size:,} bytes could hold")
        return n

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if kind in _GGUF_SCALARS:
            self.skip(_GGUF_SCALARS[kind], "a value")
        elif kind == _GGUF_STRING:
            self.skip(self.uint(8, "a string"), "a string")
        elif kind == _GGUF_ARRAY and depth < _GGUF_MAX_NESTING:
            item = self.uint(4, "an array")
            if item in _GGUF_SCALARS:
                self.skip(self.count("array items", _GGUF_SCALARS[item], 1 << 62) * _GGUF_SCALARS[item], "an array")
            else:
                for _ in range(self.count("array items", 8 if item == _GGUF_STRING else 12, _GGUF_MAX_LIST)):
                    self.skip_value(item, depth + 1)
        else:
            raise self.fail(f"value type {kind} is not one GGUF defines")

    def tensor_sizes(self) -> dict[str, int]:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        if self.take(4, "the magic") != b"GGUF":
            raise self.fail("no GGUF magic")
        version = self.uint(4, "the version")
        if version & 0xFFFF == 0:  # written on a machine of the other byte order
            self.order, version = ">", int.from_bytes(version.to_bytes(4, "little"), "big")
        if version not in (2, 3):
            raise self.fail(f"version {version}; versions 2 and 3 are read")
        n_tensors = self.uint(8, "the tensor count")
        n_keys = self.count("keys", 8 + 4 + 1, _GGUF_MAX_KEYS)
        if n_tensors > _GGUF_MAX_TENSORS or n_tensors * (8 + 4 + 4 + 8) > self.left():
            raise self.fail(f"it declares {n_tensors:,} tensors, more than the file's {self.size:,} bytes could hold")
        alignment = 32
        for _ in range(n_keys):
            key = self.string("a key")
            kind = self.uint(4, "a value type")
            if key == b"general.alignment" and kind == _GGUF_UINT32:
                alignment = self.uint(4, "general.alignment")
                if alignment == 0 or alignment & (alignment - 1):
                    raise self.fail(f"general.alignment {alignment} is not a power of two")
            else:
                self.skip_value(kind)
        table = []
        for _ in range(n_tensors):
            name = self.string("a tensor name").decode("utf-8", "replace")
            n_dims = self.uint(4, "a tensor's dimensions")
            if n_dims > _GGUF_MAX_DIMS:
                raise self.fail(f"tensor {name[:80]!r} has {n_dims:,} dimensions")
            elements = math.prod(self.uint(8, "a tensor's shape") for _ in range(n_dims))
            kind = self.uint(4, "a tensor's type")
            offset = self.uint(8, "a tensor's offset")
            try:
                block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            except (ValueError, KeyError):
                raise self.fail(f"tensor {name[:80]!r} has ggml type {kind}, which gguf does not know") from None
            table.append((name, offset, elements * type_size // block))
        data = -(-self.f.tell() // alignment) * alignment
        for name, offset, n_bytes in table:
            if data + offset + n_bytes > self.size:
                raise self.fail(f"tensor {name[:80]!r} of {n_bytes:,} bytes runs past the end of the file")
        return {name: n_bytes for name, _, n_bytes in table}


def read_gguf(path: Path) -> WeightFile:
    f, size = open_regular(path, "a .gguf file")
    with f:
        sizes = _GGUFHeader(f, size, path).tensor_sizes()
    return _summarise(str(path), "gguf", sizes)


def read_hub(repo_id: str) -> WeightFile:
    from huggingface_hub import get_safetensors_metadata
    from huggingface_hub.errors import HfHubHTTPError, NotASafetensorsRepoError

    try:
        meta = get_safetensors_metadata(repo_id)
    except NotASafetensorsRepoError:
        raise InputError(f"{repo_id} has no safetensors weights to read sizes from") from None
    except (HfHubHTTPError, OSError, ValueError) as err:
        raise InputError(f"{repo_id}: could not read its safetensors headers ({err}); offline?") from None
    sizes = {
        name: _span(repo_id, name, list(info.data_offsets), None)
        for file in meta.files_metadata.values()
        for name, info in file.tensors.items()
    }
    return _summarise(repo_id, "hub", sizes)


def read_weights(source: str) -> WeightFile:
    """Exact weight sizes from a .gguf, a .safetensors file or folder, or a Hub repo id."""
    path = Path(source).expanduser()
    if path.suffix == ".gguf" and path.exists():
        return read_gguf(path)  # which refuses a pipe or a device before opening it
    if path.exists():
        return read_safetensors(path)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        return read_hub(source)
    raise InputError(f"no weights at {source!r}: give a .gguf file, a .safetensors file or folder, or a Hub repo id")
