"""A GGUF named the way llama.cpp's `-hf` and Ollama's `hf.co/` name it, sized from its header without the weights.

`org/repo:QUANT`, `hf.co/org/repo:QUANT` (Ollama; also `huggingface.co/`), or `org/repo` alone. The repo's files
are listed through huggingface_hub, the file is picked by llama.cpp's rule (`pick_files`; llama.cpp @ 0c1e57098, the
source llama-cpp-python 0.3.36 vendors; for Ollama the Hub picks server-side, Q4_K_M by default per
huggingface.co/docs/hub/ollama, and its fallback without a Q4_K_M may differ), and only the header of
each file (every shard of a split model) is read, in growing byte ranges, until the tensor table is parsed: a few
MiB of a many-GiB file. Unsloth "UD" and bartowski mixes pick types per tensor that llama-quantize's defaults do
not, so the header is the only exact source of a quant's bytes.

The parsed tables are cached on disk under $KVSCOPE_CACHE/gguf keyed by repo, commit sha and file, so a second use
reads no header bytes; with HF_HUB_OFFLINE=1 or no network the last listing seen answers, then huggingface_hub's
own cache of downloaded files. Nothing of the repo is executed, and no local path is ever taken from the name.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.files import cache_dir, write_json_atomic
from core.memory.weightfiles import (
    GGUF_FIRST_READ,
    MAX_GGUF_HEADER,
    GGUFHeader,
    GGUFTensor,
    WeightFile,
    gguf_header,
    parse_gguf,
    summarise,
)
from core.units import format_bytes

CACHE_DIR = cache_dir() / "gguf"
HUB_TIMEOUT_S = 10.0  # per request: past this the Hub counts as unreachable and the caches answer
SHARD_FIRST_READ = 256 << 10  # a split model's later shards carry no vocabulary: their headers are tens of KiB
HEADERS_BUDGET = 2 * MAX_GGUF_HEADER  # all shards' header reads together: a repo of many huge headers is refused
_PREFIX = re.compile(r"^(?:https?://)?(?:hf\.co|huggingface\.co)/", re.ASCII | re.IGNORECASE)
_NAME = re.compile(r"^([\w.-]+/[\w.-]+)(?::([\w.+-]+))?$", re.ASCII)
_SHA = re.compile(r"^[0-9a-f]{40}$")
# llama.cpp common/download.cpp:find_best_model @ 0c1e57098: without a tag, Q4_K_M, then Q8_0, then the first model
DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
# common/download.cpp:gguf_filename_is_model: the sidecar files a model repo may carry beside the model
_SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.IGNORECASE)  # get_gguf_split_info's re_split
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.IGNORECASE)  # get_gguf_split_info's re_tag


@dataclass(frozen=True)
class GGUFName:
    repo_id: str
    tag: str  # "" when none was given: llama.cpp's default pick

    def __str__(self) -> str:
        return f"{self.repo_id}:{self.tag}" if self.tag else self.repo_id


def gguf_name(text: str) -> GGUFName | None:
    """The name when `text` names a GGUF on the Hub: with an `hf.co/` prefix, a `:QUANT` tag, or a repo whose name
    ends in GGUF; None for anything else (a plain `org/name` is a safetensors repo or a config to its callers).

    llama.cpp common/download.cpp:common_download_split_repo_tag @ 0c1e57098 takes the text after the last ':' as the
    tag and wants `user/model` before it; here exactly one ':' is allowed and both parts must be Hub-shaped."""
    text = text.strip()
    prefixed = bool(_PREFIX.match(text))
    bare = _PREFIX.sub("", text, count=1)
    match = _NAME.match(bare)
    if not match:
        if prefixed or (":" in bare and bare.count("/") == 1):
            raise InputError(
                f"{text[:80]!r} is not a Hub GGUF name; write org/repo:QUANT, e.g. bartowski/Qwen_Qwen3-8B-GGUF:Q4_K_M"
            )
        return None
    repo_id, tag = match.group(1), match.group(2) or ""
    named = repo_id.lower().endswith("gguf") and not repo_id.lower().endswith(".gguf")  # x/y.gguf: a missing file
    if not (prefixed or tag or named):
        return None
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)  # the Hub's own rule: no `..`, no leading `.` or `-`, at most 96 characters
    except HFValidationError as err:
        raise InputError(f"{repo_id[:80]!r} is not a valid Hub repo id ({err})") from None
    return GGUFName(repo_id, tag)


def _split_info(path: str) -> tuple[str, str, int, int]:
    """(prefix, tag, index, count): llama.cpp common/download.cpp:get_gguf_split_info @ 0c1e57098."""
    prefix, index, count = path.removesuffix(".gguf"), 1, 1
    split = _SPLIT.match(prefix)
    if split:
        prefix, index, count = split.group(1), int(split.group(2)), int(split.group(3))
    tag = _TAG.search(prefix)
    return prefix, tag.group(1).upper() if tag else "", index, count


def _is_model(path: str) -> bool:
    """common/download.cpp:gguf_filename_is_model: a .gguf that is no projector, imatrix or draft model."""
    return path.endswith(".gguf") and not any(s in path.rsplit("/", 1)[-1] for s in _SIDECARS)


def pick_files(paths: list[str], tag: str, repo_id: str) -> tuple[str, ...]:
    """The model file a tag selects and its split siblings, in shard order, as llama.cpp picks them
    (common/download.cpp:find_best_model and get_split_files @ 0c1e57098): the first path in the Hub's listing order
    that is a model file, contains `TAG.` or `TAG-` anywhere (case-insensitive), and is not a shard past the first;
    without a tag Q4_K_M, then Q8_0, then the first model file. llama.cpp compiles the tag as a regex; here it is
    matched literally (a real tag holds only letters, digits and `_`, where the two agree)."""
    info = {p: _split_info(p) for p in paths if _is_model(p)}  # (prefix, tag, index, count)
    models = list(info)
    firsts = [p for p in models if info[p][3] <= 1 or info[p][2] == 1]
    chosen = None
    for t in (tag,) if tag else DEFAULT_TAGS:
        pattern = re.compile(re.escape(t) + "[.-]", re.IGNORECASE)
        chosen = next((p for p in firsts if pattern.search(p)), None)
        if chosen:
            break
    if chosen is None and not tag and firsts:
        chosen = firsts[0]
    if chosen is None:
        tags = sorted({info[p][1] for p in firsts} - {""})
        if not models:
            raise InputError(f"{repo_id} has no GGUF model files")
        raise InputError(
            f"{repo_id} has no GGUF file for {tag!r}; its quants: {', '.join(tags) or 'none tagged'} "
            f"(files: {', '.join(firsts[:12])}{', ...' if len(firsts) > 12 else ''}); write {repo_id}:QUANT"
        )
    prefix, _, _, count = info[chosen]
    if count <= 1:
        return (chosen,)
    shards = sorted((info[p][2], p) for p in models if info[p][0] == prefix and info[p][3] == count)
    if [i for i, _ in shards] != list(range(1, count + 1)):
        raise InputError(f"{repo_id}: {chosen} is split in {count} parts but the repo holds {len(shards)} of them")
    return tuple(p for _, p in shards)


@dataclass(frozen=True)
class Listing:
    sha: str  # the commit the files were listed at
    files: tuple[tuple[str, int], ...]  # (path, bytes), in the Hub's tree order (llama.cpp picks in that order)
    origin: str  # where the listing came from


@dataclass(frozen=True)
class HubGGUF:
    name: GGUFName
    sha: str
    files: tuple[str, ...]  # one, or every shard of a split model
    headers: tuple[GGUFHeader, ...]
    bytes_read: int  # header bytes fetched from the Hub this time (0 when a cache answered)
    origin: str

    @property
    def metadata(self) -> dict[str, Any]:
        return self.headers[0].metadata  # the first shard carries the model's keys (gguf-split writes them there)

    @property
    def tensors(self) -> tuple[GGUFTensor, ...]:
        return tuple(t for h in self.headers for t in h.tensors)

    def type_bytes(self) -> dict[str, int]:
        """Bytes per ggml type, largest first: what a quant mix actually stores."""
        out: dict[str, int] = {}
        for t in self.tensors:
            out[t.ggml_type] = out.get(t.ggml_type, 0) + t.n_bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    @property
    def file(self) -> str:
        """The file, or its first shard and how many follow."""
        return self.files[0] if len(self.files) == 1 else f"{self.files[0]} (+{len(self.files) - 1} shards)"

    @property
    def label(self) -> str:
        return f"{self.name.repo_id}/{self.file}@{self.sha[:8]}"

    def mix(self, most: int | None = None) -> str:
        """Bytes per ggml type, largest first (the `most` largest): `Q4_K 3.90 GiB, Q6_K 1.23 GiB, …`."""
        return ", ".join(f"{k} {format_bytes(v)}" for k, v in list(self.type_bytes().items())[:most])

    def weights(self) -> WeightFile:
        return summarise(self.label, "gguf", {t.name: t.n_bytes for t in self.tensors})

    def summary(self) -> str:
        """The file and its quant mix, e.g. `org/x-GGUF/x-Q4_K_M.gguf@1a2b3c4d (399 tensors: Q4_K 3.9 GiB, ...)`."""
        return f"{self.label} ({len(self.tensors):,} tensors: {self.mix(6)})"


# ---------------------------------------------------------------- the disk cache


def _repo_dir(repo_id: str) -> Path:
    return CACHE_DIR / repo_id.replace("/", "--")  # the id is Hub-shaped: no separator survives this


def _header_path(repo_id: str, sha: str, path: str) -> Path:
    # a hash of the path, not the path: a name from the Hub's listing never becomes a path on this machine
    return _repo_dir(repo_id) / sha / f"{hashlib.sha256(path.encode()).hexdigest()[:32]}.json"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _store_header(repo_id: str, sha: str, path: str, header: GGUFHeader) -> None:
    tensors = [[t.name, t.ggml_type, list(t.shape), t.n_bytes] for t in header.tensors]
    record = {"path": path, "header_bytes": header.header_bytes, "metadata": header.metadata, "tensors": tensors}
    write_json_atomic(_header_path(repo_id, sha, path), record)


def _cached_header(repo_id: str, sha: str, path: str) -> GGUFHeader | None:
    record = _read_json(_header_path(repo_id, sha, path))
    try:
        if record["path"] != path:
            return None
        tensors = tuple(GGUFTensor(n, t, tuple(s), int(b)) for n, t, s, b in record["tensors"])
        return GGUFHeader(dict(record["metadata"]), tensors, int(record["header_bytes"]))
    except (TypeError, KeyError, ValueError):
        return None  # damaged or from another layout: read the header again


# ---------------------------------------------------------------- the Hub


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or None


@contextmanager
def _hub_errors(repo_id: str, what: str) -> Iterator[None]:
    """The Hub's refusals as InputErrors naming the repo; an unreachable Hub (see _unreachable) passes through."""
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except GatedRepoError:
        raise InputError(f"{repo_id} is gated: accept its licence on the Hub and set HF_TOKEN") from None
    except RepositoryNotFoundError:
        raise InputError(f"no Hugging Face repo {repo_id!r} (or it is private: set HF_TOKEN)") from None
    except (EntryNotFoundError, RevisionNotFoundError) as err:
        raise InputError(f"{repo_id}: {what}: {str(err).splitlines()[0]}") from None
    except HfHubHTTPError as err:
        raise InputError(f"{repo_id}: {what} failed ({str(err).splitlines()[0]}); try again") from None


def _unreachable() -> tuple[type[BaseException], ...]:
    from huggingface_hub.errors import HTTPError, OfflineModeIsEnabled

    return OfflineModeIsEnabled, HTTPError, OSError


def _list_online(repo_id: str) -> Listing:
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    api = HfApi(token=_token())
    with _hub_errors(repo_id, "listing its files"):
        sha = api.model_info(repo_id, timeout=HUB_TIMEOUT_S).sha or ""
        if not _SHA.match(sha):
            raise InputError(f"{repo_id}: the Hub gave no commit sha for its main branch")
        # the same listing llama.cpp asks for (common/hf-cache.cpp:get_repo_files: tree/<commit>?recursive=true)
        tree = api.list_repo_tree(repo_id, revision=sha, recursive=True)
        files = tuple((f.path, int(f.size)) for f in tree if isinstance(f, RepoFile))
    return Listing(sha, files, "Hugging Face Hub")


def _list_hf_cache(repo_id: str) -> Listing | None:
    """The files of the main branch as huggingface_hub's own cache holds them (downloads, whole files only)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    folder = Path(constants.HF_HUB_CACHE) / repo_folder_name(repo_id=repo_id, repo_type="model")
    try:
        sha = (folder / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snapshot = folder / "snapshots" / sha
    if not _SHA.match(sha) or not snapshot.is_dir():
        return None
    files = tuple(
        (p.relative_to(snapshot).as_posix(), p.stat().st_size) for p in sorted(snapshot.rglob("*.gguf")) if p.is_file()
    )
    return Listing(sha, files, "huggingface_hub's local cache") if files else None


def list_repo(repo_id: str) -> Listing:
    """The repo's files at its main branch: from the Hub, else (offline, unreachable) the last listing kvscope saw,
    else huggingface_hub's cache. The Hub is asked each time (a new upload moves main); its answer is cached."""
    from huggingface_hub import is_offline_mode

    saved = _repo_dir(repo_id) / "main.json"
    reason = "HF_HUB_OFFLINE is set"
    if not is_offline_mode():
        try:
            listing = _list_online(repo_id)
        except _unreachable() as err:
            reason = f"the Hub cannot be reached ({type(err).__name__})"
        else:
            write_json_atomic(saved, {"sha": listing.sha, "files": [list(f) for f in listing.files]})
            return listing
    record = _read_json(saved)
    try:
        if _SHA.match(record["sha"]):
            files = tuple((str(p), int(n)) for p, n in record["files"])
            return Listing(record["sha"], files, f"kvscope's cache ({reason})")
    except (TypeError, KeyError, ValueError):
        pass
    cached = _list_hf_cache(repo_id)
    if cached is not None:
        return cached
    raise InputError(
        f"{repo_id}: {reason}, and neither kvscope's cache nor huggingface_hub's holds its file list; "
        "run once with network (then it works offline), or download the .gguf and give its path to the command "
        "line (the app reads GGUFs by Hub name only)"
    )


def _ranged_reader(repo_id: str, sha: str, path: str, counter: list[int]):
    """read(start, end): bytes [start, end) of a Hub file through huggingface_hub's HTTP session, with a Range
    header; a server that ignores Range is read only up to `end` and the rest is never fetched."""
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, path, revision=sha, endpoint=constants.ENDPOINT)

    def read(start: int, end: int) -> bytes:
        if counter[0] + end - start > HEADERS_BUDGET:
            raise InputError(
                f"{repo_id}: its GGUF headers together run past {format_bytes(HEADERS_BUDGET)}, more than a real "
                "model's; download the files and give a local path"
            )
        headers = build_hf_headers(token=_token()) | {"Range": f"bytes={start}-{end - 1}"}
        held = bytearray()
        with (
            _hub_errors(repo_id, f"reading {path}"),
            get_session().stream("GET", url, headers=headers, timeout=HUB_TIMEOUT_S) as response,
        ):
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            skip = start if response.status_code == 200 else 0  # 200: the whole file, from byte 0
            for chunk in response.iter_bytes():
                counter[0] += len(chunk)
                held += chunk
                if len(held) >= skip + end - start:
                    break
        return bytes(held[skip : skip + end - start])

    return read


def _header(repo_id: str, sha: str, path: str, size: int, counter: list[int]) -> tuple[GGUFHeader, str]:
    cached = _cached_header(repo_id, sha, path)
    if cached is not None:
        return cached, "kvscope's cache"
    from huggingface_hub import try_to_load_from_cache

    local = try_to_load_from_cache(repo_id, path, revision=sha)
    if isinstance(local, str):
        header, origin = gguf_header(Path(local)), "huggingface_hub's local cache"
    else:
        from huggingface_hub import is_offline_mode

        if is_offline_mode():
            raise InputError(
                f"{repo_id}/{path}: HF_HUB_OFFLINE is set and its header has not been read before; "
                "unset HF_HUB_OFFLINE once (a few MiB are read, then it works offline), or give a local .gguf path"
            )
        try:
            read = _ranged_reader(repo_id, sha, path, counter)
            first = GGUF_FIRST_READ if _split_info(path)[2] == 1 else SHARD_FIRST_READ
            header = parse_gguf(read, size, f"{repo_id}/{path}", first)
        except _unreachable() as err:
            raise InputError(f"{repo_id}/{path}: the Hub cannot be reached to read its header ({err})") from None
        origin = "Hugging Face Hub, header only"
    _store_header(repo_id, sha, path, header)
    return header, origin


def read_hub_gguf(name: GGUFName) -> HubGGUF:
    """The tensor table and metadata of the GGUF a Hub name selects (every shard's), from the caches or the Hub."""
    listing = list_repo(name.repo_id)
    sizes = dict(listing.files)
    files = pick_files([p for p, _ in listing.files], name.tag, name.repo_id)
    counter = [0]
    found = [_header(name.repo_id, listing.sha, p, sizes[p], counter) for p in files]
    origins = sorted({o for _, o in found})
    origin = f"files listed from {listing.origin}; headers from {', '.join(origins)}"
    if counter[0]:
        origin += f" ({format_bytes(counter[0])} read)"
    return HubGGUF(name, listing.sha, files, tuple(h for h, _ in found), counter[0], origin)


# ---------------------------------------------------------------- which config describes it


_REPO_URL = re.compile(r"^https?://(?:huggingface\.co|hf\.co)/([\w.-]+/[\w.-]+?)/?$", re.ASCII)


def base_model(metadata: dict[str, Any]) -> tuple[str, str]:
    """(the model whose config.json gives this GGUF's architecture, the metadata key that named it).

    convert_hf_to_gguf.py writes the source checkpoint's card `base_model` as general.base_model.N.repo_url; a
    converted original has none, and its general.basename (with general.size_label) names it instead, matched
    against the bundled presets."""
    from core.model.loading import preset_path

    url = metadata.get("general.base_model.0.repo_url")
    match = _REPO_URL.match(url) if isinstance(url, str) else None
    if match:
        return match.group(1), "general.base_model.0.repo_url"
    basename, size = metadata.get("general.basename"), metadata.get("general.size_label")
    if isinstance(basename, str):
        for candidate in (f"{basename}-{size}", basename) if isinstance(size, str) else (basename,):
            preset = preset_path(candidate)
            if preset is not None:
                return preset.stem.replace("__", "/", 1), "general.basename"
    named = {k: metadata[k] for k in ("general.name", "general.basename", "general.architecture") if k in metadata}
    raise InputError(
        f"the GGUF names no base model on the Hub (no general.base_model.0.repo_url) and no bundled preset matches "
        f"{named}; give the model's config (repo id or config.json) as the model and the GGUF with --weights-file"
    )


def shape_mismatch(metadata: dict[str, Any], raw: dict[str, Any]) -> str | None:
    """Where the config named by base_model disagrees with the GGUF's own shape keys (a card's base_model can name
    a model of another architecture): the depth (llama.cpp counts MTP blocks in block_count, beside
    nextn_predict_layers) and the width. None when they agree or a key is missing."""
    arch = metadata.get("general.architecture")
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    pairs = (
        ("layers", metadata.get(f"{arch}.block_count"), text.get("num_hidden_layers") or text.get("n_layer")),
        ("hidden size", metadata.get(f"{arch}.embedding_length"), text.get("hidden_size") or text.get("d_model")),
    )
    nextn = metadata.get(f"{arch}.nextn_predict_layers", 0)
    for what, in_gguf, in_config in pairs:
        if isinstance(in_gguf, int) and isinstance(in_config, int):
            expected = in_config + (nextn if what == "layers" and isinstance(nextn, int) else 0)
            if in_gguf != expected:
                return f"the GGUF has {in_gguf} {what}, that config {expected}: the sizes follow the config"
    return None
