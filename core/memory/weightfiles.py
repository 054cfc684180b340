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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.files import open_regular

_LAYER = re.compile(r"(?:^|\.)(?:layers|blk|h|block)\.(\d+)\.")
_EMBEDDING = ("embed_tokens", "token_embd", "wte.", "word_embeddings")
_HEADS = ("output.weight", "lm_head.weight")  # GGUF's and transformers' names of an untied output head


@dataclass(frozen=True)
class WeightFile:
    source: str
    kind: str  # "safetensors" | "gguf" | "hub"
    total_bytes: int
    layer_bytes: tuple[tuple[int, int], ...]  # (layer index, bytes), sorted
    embedding_bytes: int
    other_bytes: int  # outside any layer and not the embedding: output head, final norm
    tied: bool = False  # no output head of its own: the embedding serves as one

    def bytes_on_gpu(self, layers: range, output: bool) -> int:
        """The decoder layers in `layers` and, with `output`, the output layer: its head, or with tied embeddings
        the embedding that llama.cpp loads a second time as the head (TENSOR_DUPLICATED in src/models/*.cpp)."""
        head = self.other_bytes + (self.embedding_bytes if self.tied else 0)
        return sum(b for i, b in self.layer_bytes if i in layers) + (head if output else 0)


def summarise(source: str, kind: str, sizes: dict[str, int]) -> WeightFile:
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
    tied = not any(name == h or name.endswith("." + h) for name in sizes for h in _HEADS if not _LAYER.search(name))
    return WeightFile(source, kind, sum(sizes.values()), tuple(sorted(per_layer.items())), embedding, other, tied)


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
    return summarise(str(path), "safetensors", sizes)


# GGUF (ggml/docs/gguf.md): magic, version, tensor count, key count, the keys, the tensor table, aligned data.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY, _GGUF_UINT32 = 8, 9, 4
_GGUF_MAX_KEYS = 1 << 16  # real files carry a few dozen
_GGUF_MAX_TENSORS = 1 << 20  # DeepSeek-V3 has under 2,000
_GGUF_MAX_DIMS = 4  # GGML_MAX_DIMS
_GGUF_MAX_NESTING = 4
_GGUF_MAX_LIST = 1 << 24  # strings or arrays in one array: a real vocabulary or merge list is under a million
_GGUF_KEPT_VALUE = 4096  # metadata strings and scalar arrays kept up to this many bytes (not the tokenizer's lists)
GGUF_FIRST_READ = 1 << 20  # the first bytes read of a header; each further read doubles what is held
MAX_GGUF_HEADER = 64 << 20  # a header is the keys (a tokenizer's vocabulary and merges: a few MiB) and the table


def _scalar_size(kind: int) -> int:
    return struct.calcsize(_GGUF_SCALARS[kind])


@dataclass(frozen=True)
class GGUFTensor:
    name: str
    ggml_type: str  # gguf's GGMLQuantizationType name, e.g. "Q4_K"
    shape: tuple[int, ...]  # as the file stores it: the fastest-varying dimension first
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    metadata: dict[str, Any]  # scalars, short strings and short arrays; the tokenizer's lists are skipped
    tensors: tuple[GGUFTensor, ...]
    header_bytes: int  # where the (aligned) tensor data starts

    def sizes(self) -> dict[str, int]:
        return {t.name: t.n_bytes for t in self.tensors}


class _Short(Exception):
    """The bytes held end before the header does: hold at least `needed` and parse again."""

    def __init__(self, needed: int):
        self.needed = needed


class _GGUFHeader:
    """Walks a GGUF header held in `buf` (the first bytes of a file of `size` bytes), with every declared count and
    length checked against the bytes left in the file before anything is read or skipped: a hostile count is an
    InputError, never an allocation or a long loop. A header longer than `buf` raises _Short, so a caller reading
    over the network fetches only the header, in growing ranges."""

    def __init__(self, buf: bytes, size: int, origin: str):
        self.buf, self.pos, self.size, self.origin, self.order = buf, 0, size, origin, "<"

    def left(self) -> int:
        return self.size - self.pos

    def fail(self, what: str) -> InputError:
        return InputError(f"{self.origin} is not a readable GGUF file ({what})")

    def need(self, n: int, what: str) -> None:
        if n > self.left():
            raise self.fail(f"{what} runs past the end of the file")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        if self.pos + n > len(self.buf):
            raise _Short(self.pos + n)
        self.pos += n
        return self.buf[self.pos - n : self.pos]

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n  # the bytes skipped need not be held; the next take asks for them if they are not

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

    def skip_strings(self, n: int) -> None:
        """`self.skip(self.uint(8, ...))` n times, inlined: a vocabulary and its merges are 300K+ strings, and this
        loop is most of the time a header takes to walk."""
        buf, pos, size, fmt = self.buf, self.pos, self.size, self.order + "Q"
        for _ in range(n):
            if pos + 8 > size:
                raise self.fail("a string runs past the end of the file")
            if pos + 8 > len(buf):
                raise _Short(pos + 8)
            pos += 8 + struct.unpack_from(fmt, buf, pos)[0]
            if pos > size:
                raise self.fail("a string runs past the end of the file")
        self.pos = pos

    def value(self, kind: int, keep: bool, depth: int = 0) -> Any:
        """One metadata value: read when `keep` and short (None otherwise), else skipped."""
        if kind in _GGUF_SCALARS:
            raw = self.take(_scalar_size(kind), "a value")
            return struct.unpack(self.order + _GGUF_SCALARS[kind], raw)[0]
        if kind == _GGUF_STRING:
            n = self.uint(8, "a string")
            if keep and n <= _GGUF_KEPT_VALUE:
                return self.take(n, "a string").decode("utf-8", "replace")
            self.skip(n, "a string")
        elif kind == _GGUF_ARRAY and depth < _GGUF_MAX_NESTING:
            item = self.uint(4, "an array")
            if item in _GGUF_SCALARS:
                n = self.count("array items", _scalar_size(item), 1 << 62)
                if keep and n * _scalar_size(item) <= _GGUF_KEPT_VALUE:
                    raw = self.take(n * _scalar_size(item), "an array")
                    return list(struct.unpack(f"{self.order}{n}{_GGUF_SCALARS[item]}", raw))
                self.skip(n * _scalar_size(item), "an array")
            elif item == _GGUF_STRING:
                self.skip_strings(self.count("array items", 8, _GGUF_MAX_LIST))
            else:
                for _ in range(self.count("array items", 12, _GGUF_MAX_LIST)):
                    self.value(item, False, depth + 1)
        else:
            raise self.fail(f"value type {kind} is not one GGUF defines")
        return None

    def parse(self) -> GGUFHeader:
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
        metadata: dict[str, Any] = {}
        for _ in range(n_keys):
            key = self.string("a key").decode("utf-8", "replace")
            value = self.value(self.uint(4, "a value type"), not key.startswith("tokenizer."))
            if value is not None:
                metadata[key] = value
        alignment = metadata.get("general.alignment", 32)
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):  # not a bool either
            raise self.fail(f"general.alignment {alignment} is not a power of two")
        table = []
        for _ in range(n_tensors):
            name = self.string("a tensor name").decode("utf-8", "replace")
            n_dims = self.uint(4, "a tensor's dimensions")
            if n_dims > _GGUF_MAX_DIMS:
                raise self.fail(f"tensor {name[:80]!r} has {n_dims:,} dimensions")
            shape = tuple(self.uint(8, "a tensor's shape") for _ in range(n_dims))
            kind = self.uint(4, "a tensor's type")
            offset = self.uint(8, "a tensor's offset")
            try:
                ggml_type = GGMLQuantizationType(kind)
                block, type_size = GGML_QUANT_SIZES[ggml_type]
            except (ValueError, KeyError):
                raise self.fail(f"tensor {name[:80]!r} has ggml type {kind}, which gguf does not know") from None
            table.append((offset, GGUFTensor(name, ggml_type.name, shape, math.prod(shape) * type_size // block)))
        data = -(-self.pos // alignment) * alignment
        for offset, t in table:
            if data + offset + t.n_bytes > self.size:
                raise self.fail(f"tensor {t.name[:80]!r} of {t.n_bytes:,} bytes runs past the end of the file")
        return GGUFHeader(metadata, tuple(t for _, t in table), data)


def parse_gguf(read: Callable[[int, int], bytes], size: int, origin: str, first: int = GGUF_FIRST_READ) -> GGUFHeader:
    """A GGUF header from `read(start, end)` (bytes [start, end) of a file of `size` bytes), read from the start in
    growing ranges (`first` bytes, then each read doubles what is held) until the tensor table is parsed: about the
    header's bytes, at most twice them (or `first`), never more than MAX_GGUF_HEADER."""
    held = b""
    want = min(size, first)
    while True:
        chunk = read(len(held), want)
        if len(chunk) != want - len(held):
            raise InputError(f"{origin}: asked for bytes {len(held):,}-{want:,}, got {len(chunk):,}; is it damaged?")
        held += chunk
        try:
            return _GGUFHeader(held, size, origin).parse()
        except _Short as short:
            if short.needed > MAX_GGUF_HEADER:
                raise InputError(
                    f"{origin}: its GGUF header runs past {MAX_GGUF_HEADER >> 20} MiB, more than a real one holds"
                ) from None
            want = min(size, MAX_GGUF_HEADER, max(short.needed, 2 * len(held)))


def gguf_header(path: Path) -> GGUFHeader:
    f, size = open_regular(path, "a .gguf file")

    def read(start: int, end: int) -> bytes:
        f.seek(start)
        return f.read(end - start)

    with f:
        return parse_gguf(read, size, str(path))


def read_gguf(path: Path) -> WeightFile:
    return summarise(str(path), "gguf", gguf_header(path).sizes())


class _NoSafetensors(InputError):
    """A Hub repo without safetensors weights: read_weights then looks for a GGUF in it."""


def read_hub(repo_id: str) -> WeightFile:
    from huggingface_hub import get_safetensors_metadata
    from huggingface_hub.errors import HfHubHTTPError, NotASafetensorsRepoError

    try:
        meta = get_safetensors_metadata(repo_id)
    except NotASafetensorsRepoError:
        raise _NoSafetensors(f"{repo_id} has no safetensors weights to read sizes from") from None
    except (HfHubHTTPError, OSError, ValueError) as err:
        raise InputError(f"{repo_id}: could not read its safetensors headers ({err}); offline?") from None
    sizes = {
        name: _span(repo_id, name, list(info.data_offsets), None)
        for file in meta.files_metadata.values()
        for name, info in file.tensors.items()
    }
    return summarise(repo_id, "hub", sizes)


def read_weights(source: str) -> WeightFile:
    """Exact weight sizes from a .gguf, a .safetensors file or folder, a Hub repo id (its safetensors headers, or
    its GGUF's when it has none), or a Hub GGUF name as llama.cpp's -hf and Ollama write it (`org/repo:QUANT`,
    `hf.co/org/repo:QUANT`): core.memory.gguf_hub reads that file's header only."""
    from core.memory.gguf_hub import GGUFName, gguf_name, read_hub_gguf  # it builds on this module

    path = Path(source).expanduser()
    if path.suffix == ".gguf" and path.exists():
        return read_gguf(path)  # which refuses a pipe or a device before opening it
    if path.is_file() and path.suffix not in (".safetensors", ".gguf"):
        raise InputError(f"{path} is neither a .gguf nor a .safetensors file; give the checkpoint's weights file")
    if path.exists():
        return read_safetensors(path)
    hub_gguf = gguf_name(source)
    if hub_gguf is not None:
        return read_hub_gguf(hub_gguf).weights()
    if re.fullmatch(r"[\w.-]{1,96}/[\w.-]{1,96}", source, re.ASCII):  # the Hub's limit; its own message repeats the id
        try:
            return read_hub(source)
        except _NoSafetensors:
            return read_hub_gguf(GGUFName(source, "")).weights()
    raise InputError(
        f"no weights at {source[:80]!r}: give a .gguf file, a .safetensors file or folder, a Hub repo id or a Hub GGUF "
        "name (org/repo:QUANT)"
    )
