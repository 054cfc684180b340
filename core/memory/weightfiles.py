"""Exact weight bytes from real files, to replace the estimate when a checkpoint is at hand.

- safetensors (a file, or a folder of shards): each tensor's byte range from the file header.
- GGUF: each tensor's stored size, read with the `gguf` package's reader (memory-mapped; no weights are loaded).
- A Hugging Face repo: the safetensors headers through `huggingface_hub.get_safetensors_metadata` (a few KB per
  shard, never the weights; needs the Hub unless the shards are in the local cache).

Tensors are attributed to layers by name (`layers.N.` in transformers checkpoints, `blk.N.` in GGUF), so llama.cpp's
partial offload can use exact per-layer sizes too.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from core.errors import InputError

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


def _safetensors_header(path: Path) -> dict[str, int]:
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise InputError(f"{path} is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > 100 << 20:
            raise InputError(f"{path}: safetensors header of {length:,} bytes is not plausible; is the file damaged?")
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise InputError(f"{path} has no readable safetensors header") from None
    return {
        name: info["data_offsets"][1] - info["data_offsets"][0]
        for name, info in header.items()
        if name != "__metadata__"
    }


def read_safetensors(path: Path) -> WeightFile:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise InputError(f"no .safetensors files in {path}")
    sizes: dict[str, int] = {}
    for file in files:
        sizes |= _safetensors_header(file)
    return _summarise(str(path), "safetensors", sizes)


def read_gguf(path: Path) -> WeightFile:
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path, "r")
    except (ValueError, OSError, struct.error) as err:
        raise InputError(f"{path} is not a readable GGUF file ({err})") from None
    return _summarise(str(path), "gguf", {t.name: int(t.n_bytes) for t in reader.tensors})


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
        name: info.data_offsets[1] - info.data_offsets[0]
        for file in meta.files_metadata.values()
        for name, info in file.tensors.items()
    }
    return _summarise(repo_id, "hub", sizes)


def read_weights(source: str) -> WeightFile:
    """Exact weight sizes from a .gguf, a .safetensors file or folder, or a Hub repo id."""
    path = Path(source).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        return read_gguf(path)
    if path.exists():
        return read_safetensors(path)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", source):
        return read_hub(source)
    raise InputError(f"no weights at {source!r}: give a .gguf file, a .safetensors file or folder, or a Hub repo id")
