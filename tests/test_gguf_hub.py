"""A GGUF by its Hub name: llama.cpp's pick of the file, only the header read (in byte ranges), the disk cache, the
offline answers and the errors. The Hub is a local server on 127.0.0.1 that honours Range and counts what it sends;
huggingface_hub itself talks to it (HF_ENDPOINT's constants pointed there), so the real client code runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.constants import GGML_QUANT_SIZES

from core.errors import InputError
from core.memory import gguf_hub
from core.memory.gguf_hub import GGUFName, gguf_name, pick_files, read_hub_gguf, shape_mismatch
from core.memory.weightfiles import GGUF_FIRST_READ, read_weights
from core.model.loading import load_model, load_raw
from tests.conftest import ROOT
from tests.engines.engine_env import run_in_engines

SHA = "0123456789abcdef0123456789abcdef01234567"
SHA2 = "89abcdef0123456789abcdef0123456789abcdef"
ROWS, COLS = 256, 512  # every tensor: 256 rows of 512 weights (a multiple of every k-quant's 256-weight block)
MIX = [  # a "UD"-like mix: each layer's tensors in different types, as llama-quantize's defaults would not pick
    ("token_embd.weight", GGMLQuantizationType.Q6_K),
    ("blk.0.attn_q.weight", GGMLQuantizationType.Q4_K),
    ("blk.0.attn_v.weight", GGMLQuantizationType.Q8_0),
    ("blk.0.ffn_down.weight", GGMLQuantizationType.Q5_K),
    ("blk.1.attn_q.weight", GGMLQuantizationType.IQ4_XS),
    ("blk.1.attn_v.weight", GGMLQuantizationType.Q6_K),
    ("blk.1.ffn_down.weight", GGMLQuantizationType.Q4_K),
    ("blk.0.attn_norm.weight", GGMLQuantizationType.F32),
    ("output.weight", GGMLQuantizationType.BF16),
]


def _raw(kind: GGMLQuantizationType, rows: int = ROWS, cols: int = COLS) -> np.ndarray:
    block, size = GGML_QUANT_SIZES[kind]
    return np.zeros((rows, cols // block * size), dtype=np.uint8)


def write_gguf(path: Path, vocab: int = 0, split_max_tensors: int = 0, rows: int = ROWS) -> list[Path]:
    """A GGUF with the mixed tensor table (`rows` rows a tensor), `vocab` tokens and merges (a real tokenizer's size
    makes the header MiBs), optionally split; returns the files written."""
    writer = GGUFWriter(str(path), "qwen3", split_max_tensors=split_max_tensors)
    writer.add_basename("Tiny")
    writer.add_size_label("8B")
    writer.add_base_model_count(1)
    writer.add_base_model_repo_url(0, "https://huggingface.co/Qwen/Qwen3-8B")
    writer.add_block_count(2)
    if vocab:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list([f"tok{i:06d}-{'x' * (i % 9)}" for i in range(vocab)])
        writer.add_token_types([1] * vocab)
        writer.add_token_merges([f"t{i} m{i % 997}" for i in range(vocab)])
    for name, kind in MIX:
        writer.add_tensor(name, _raw(kind, 1 if kind == GGMLQuantizationType.F32 else rows), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(path) if split_max_tensors else [path]


class FakeHub:
    """The Hub's three endpoints huggingface_hub calls here: model info (the commit sha), the recursive tree (files
    and sizes, in the order given), and resolve (bytes, honouring Range). Counts requests and bytes sent."""

    def __init__(self) -> None:
        self.repos: dict[str, tuple[str, list[tuple[str, Path]]]] = {}
        self.requests: Counter[str] = Counter()
        self.sent: Counter[str] = Counter()  # file bytes sent, by path in the repo
        self.ranges: list[str] = []

    def add(self, repo: str, files: list[tuple[str, Path]], sha: str = SHA) -> None:
        self.repos[repo] = (sha, files)

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def reply(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def missing(self, code: str) -> None:
                self.reply(404, b"{}", {"X-Error-Code": code, "Content-Type": "application/json"})

            def do_HEAD(self) -> None:  # a file's metadata: get_safetensors_metadata asks for model.safetensors
                parts = unquote(urlsplit(self.path).path).strip("/").split("/")
                hub.requests["head"] += 1
                if "/".join(parts[4:]) not in dict(hub.repos.get("/".join(parts[:2]), ("", []))[1]):
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                raise AssertionError("no test asks for the metadata of a file it serves")

            def do_GET(self) -> None:  # http.server calls it by this name
                parts = unquote(urlsplit(self.path).path).strip("/").split("/")
                api = parts[0] == "api"
                repo = "/".join(parts[2:4] if api else parts[0:2])
                hub.requests["tree" if api and "tree" in parts else "info" if api else "resolve"] += 1
                if repo not in hub.repos:
                    return self.missing("RepoNotFound")
                sha, files = hub.repos[repo]
                if api and len(parts) == 4:
                    body = {"id": repo, "sha": sha, "siblings": [{"rfilename": p} for p, _ in files]}
                    return self.reply(200, json.dumps(body).encode(), {"Content-Type": "application/json"})
                if api:
                    tree = [{"type": "directory", "path": "sub", "oid": "0" * 40, "size": 0}] + [
                        {"type": "file", "path": p, "size": f.stat().st_size, "oid": "1" * 40} for p, f in files
                    ]
                    return self.reply(200, json.dumps(tree).encode(), {"Content-Type": "application/json"})
                path = "/".join(parts[4:])
                local = dict(files).get(path)
                if local is None:
                    return self.missing("EntryNotFound")
                size = local.stat().st_size
                start, end = 0, size - 1
                spec = self.headers.get("Range")
                if spec:
                    first, last = spec.removeprefix("bytes=").split("-")
                    start, end = int(first), min(int(last), size - 1)
                    hub.ranges.append(spec)
                hub.sent[path] += end + 1 - start
                with local.open("rb") as f:  # only the range: a file may be a sparse one of the real size
                    f.seek(start)
                    data = f.read(end + 1 - start)
                headers = {"Content-Range": f"bytes {start}-{end}/{size}"} if spec else {}
                self.reply(206 if spec else 200, data, headers)

        return Handler


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """The fake Hub, with huggingface_hub pointed at it and online; kvscope's and huggingface_hub's caches empty."""
    from huggingface_hub import constants, hf_api

    fake = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(hf_api.api, "endpoint", endpoint)  # the module-level HfApi behind get_safetensors_metadata
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.setattr(gguf_hub, "CACHE_DIR", tmp_path / "kvscope-cache")
    fake.endpoint = endpoint
    yield fake
    server.shutdown()
    server.server_close()


def offline(monkeypatch) -> None:
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# ---------------------------------------------------------------- names and llama.cpp's pick


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("unsloth/Qwen3.5-9B-GGUF:UD-Q4_K_XL", GGUFName("unsloth/Qwen3.5-9B-GGUF", "UD-Q4_K_XL")),
        ("bartowski/Qwen_Qwen3-8B-GGUF:Q4_K_M", GGUFName("bartowski/Qwen_Qwen3-8B-GGUF", "Q4_K_M")),
        ("hf.co/unsloth/gpt-oss-20b-GGUF:Q4_K_M", GGUFName("unsloth/gpt-oss-20b-GGUF", "Q4_K_M")),  # Ollama
        ("huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF", GGUFName("bartowski/Llama-3.2-1B-Instruct-GGUF", "")),
        ("https://huggingface.co/org/some-model", GGUFName("org/some-model", "")),
        ("ggml-org/gemma-3-1b-it-GGUF", GGUFName("ggml-org/gemma-3-1b-it-GGUF", "")),
        ("Qwen/Qwen3-8B", None),  # a safetensors repo or a config: not a GGUF name
        ("models/qwen.gguf", None),  # a local file that is missing, not a repo
        ("config.json", None),
    ],
)
def test_names_in_llama_cpp_and_ollama_forms(text, expected):
    assert gguf_name(text) == expected


@pytest.mark.parametrize("text", ["hf.co/just-one-part", "org/repo:Q4:K", "../etc:Q4_K_M", "hf.co/a/b:Q4 K"])
def test_malformed_names_are_refused(text):
    with pytest.raises(InputError, match=r"not a valid Hub repo id|not a Hub GGUF name"):
        gguf_name(text)


# Listings as a repo's tree gives them. The expected picks follow common/download.cpp:find_best_model @ 0c1e57098, read
# by hand: first match of `TAG[.-]` in listing order, case-insensitive, shards past the first never picked.
LISTING = [
    "README.md",
    "mmproj-model-f16.gguf",
    "model-Q8_0.gguf",
    "model-UD-Q4_K_XL.gguf",
    "model-UD-Q4_K_M.gguf",
    "model-Q4_K_M.gguf",
    "model-Q4_K_S.gguf",
    "BF16/model-BF16-00002-of-00002.gguf",
    "BF16/model-BF16-00001-of-00002.gguf",
]


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("", ("model-UD-Q4_K_M.gguf",)),  # Q4_K_M first, and "UD-Q4_K_M." holds "Q4_K_M.": listing order decides
        ("q4_k_m", ("model-UD-Q4_K_M.gguf",)),  # case-insensitive
        ("UD-Q4_K_XL", ("model-UD-Q4_K_XL.gguf",)),
        ("Q4_K_XL", ("model-UD-Q4_K_XL.gguf",)),  # matched anywhere in the path
        ("Q4_K_S", ("model-Q4_K_S.gguf",)),
        ("bf16", ("BF16/model-BF16-00001-of-00002.gguf", "BF16/model-BF16-00002-of-00002.gguf")),  # every shard
        ("F16", ("BF16/model-BF16-00001-of-00002.gguf", "BF16/model-BF16-00002-of-00002.gguf")),  # "BF16-" holds "F16-"
    ],
)
def test_pick_follows_llama_cpp(tag, expected):
    assert pick_files(LISTING, tag, "org/repo-GGUF") == expected


def test_default_pick_falls_back_to_q8_then_the_first_model_file():
    assert pick_files(["a-Q5_K_M.gguf", "a-Q8_0.gguf"], "", "o/r") == ("a-Q8_0.gguf",)
    assert pick_files(["mmproj-x.gguf", "a-IQ2_XXS.gguf", "a-Q5_K_M.gguf"], "", "o/r") == ("a-IQ2_XXS.gguf",)


def test_no_such_quant_lists_the_available_ones():
    with pytest.raises(InputError) as err:
        pick_files(LISTING, "Q4_K", "org/repo-GGUF")  # "Q4_K" is followed by "_" in every file: no match
    message = str(err.value)
    assert "no GGUF file for 'Q4_K'" in message
    for tag in ("Q8_0", "Q4_K_XL", "Q4_K_M", "Q4_K_S", "BF16"):
        assert tag in message
    assert "MMPROJ" not in message.upper().replace("MMPROJ-MODEL", "")  # the projector is not a model file
    with pytest.raises(InputError, match="has no GGUF model files"):
        pick_files(["README.md", "mmproj-f16.gguf"], "", "org/repo-GGUF")


def test_a_split_model_missing_a_shard_is_refused():
    with pytest.raises(InputError, match="split in 3 parts but the repo holds 2"):
        pick_files(["m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"], "Q8_0", "o/r")


# ---------------------------------------------------------------- the header, in ranges, and nothing else


def _expected_table(paths: list[Path]) -> dict[str, tuple[str, int]]:
    """The tensor table as gguf-py's own reader (an independent implementation: it maps the whole file) gives it."""
    out = {}
    for p in paths:
        for t in GGUFReader(str(p)).tensors:
            out[t.name] = (t.tensor_type.name, int(t.n_bytes))
    return out


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """A model whose header carries a 152K-token vocabulary and as many merges (Qwen3's is 151,936 tokens), and
    ten times the header's bytes in tensor data."""
    path = tmp_path_factory.mktemp("big") / "Tiny-8B-UD-Q4_K_XL.gguf"
    write_gguf(path, vocab=152_000, rows=16 * 1024)
    return path


@pytest.fixture(scope="module")
def big_table(big) -> dict[str, tuple[str, int]]:
    return _expected_table([big])  # gguf-py's reader takes seconds over the 152K strings: once per module


def test_only_the_header_is_read_in_growing_ranges(hub, big, big_table):
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    found = read_hub_gguf(GGUFName("org/tiny-GGUF", "ud-q4_k_xl"))
    header_bytes = found.headers[0].header_bytes
    size = big.stat().st_size
    assert header_bytes > 2 * GGUF_FIRST_READ, "the vocabulary should need several reads"
    assert len(hub.ranges) >= 2 and hub.ranges[0] == f"bytes=0-{GGUF_FIRST_READ - 1}"
    assert header_bytes <= hub.sent["Tiny-8B-UD-Q4_K_XL.gguf"] == found.bytes_read <= 2 * header_bytes
    assert found.bytes_read < size / 5, "the tensor data was read"
    table = {t.name: (t.ggml_type, t.n_bytes) for t in found.tensors}
    assert table == big_table
    assert {t for t, _ in table.values()} == {k.name for _, k in MIX}
    assert found.metadata["general.base_model.0.repo_url"] == "https://huggingface.co/Qwen/Qwen3-8B"
    assert not any(k.startswith("tokenizer.ggml.tokens") for k in found.metadata)  # skipped, never held


def test_the_table_matches_libggml(hub, big, tmp_path):
    """libggml's own GGUF reader (gguf_init_from_file, no_alloc, in the engines' libllama build) gives the same
    names, types and byte sizes for every tensor as the ranged read."""
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    found = read_hub_gguf(GGUFName("org/tiny-GGUF", "UD-Q4_K_XL"))
    proc = run_in_engines(["-c", LIBGGML_TABLE, str(big)], timeout=120)
    engine = {name: (kind.upper(), n) for name, kind, n in json.loads(proc.stdout.splitlines()[-1])}
    assert engine == {t.name: (t.ggml_type, t.n_bytes) for t in found.tensors}


LIBGGML_TABLE = r"""
import ctypes, json, sys
from pathlib import Path
import llama_cpp
lib = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))
class Params(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]
lib.gguf_init_from_file.restype = ctypes.c_void_p
lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, Params]
for f, res in (("gguf_get_n_tensors", ctypes.c_int64), ("gguf_get_tensor_name", ctypes.c_char_p),
               ("gguf_get_tensor_type", ctypes.c_int), ("gguf_get_tensor_size", ctypes.c_size_t)):
    getattr(lib, f).restype = res
lib.ggml_type_name.restype = ctypes.c_char_p
ctx = lib.gguf_init_from_file(sys.argv[1].encode(), Params(True, None))
assert ctx, "libggml could not read the file"
rows = []
for i in range(lib.gguf_get_n_tensors(ctypes.c_void_p(ctx))):
    c, i = ctypes.c_void_p(ctx), ctypes.c_int64(i)
    kind = lib.ggml_type_name(lib.gguf_get_tensor_type(c, i)).decode()
    rows.append([lib.gguf_get_tensor_name(c, i).decode(), kind, lib.gguf_get_tensor_size(c, i)])
print(json.dumps(rows))
"""


def test_a_split_model_reads_every_shard_header(hub, tmp_path):
    files = write_gguf(tmp_path / "Tiny-Q8_0.gguf", split_max_tensors=4)
    assert len(files) == 3
    hub.add("org/split-GGUF", [("README.md", files[0])] + [(f"Q8_0/{f.name}", f) for f in reversed(files)])
    found = read_hub_gguf(GGUFName("org/split-GGUF", "q8_0"))
    assert found.files == tuple(f"Q8_0/{f.name}" for f in files)
    assert {t.name: (t.ggml_type, t.n_bytes) for t in found.tensors} == _expected_table(files)
    assert set(hub.sent) == set(found.files)
    assert found.metadata["split.count"] == 3
    weights = found.weights()
    assert weights.total_bytes == sum(n for _, n in _expected_table(files).values())


def test_the_cache_answers_the_second_time_and_offline(hub, big, monkeypatch):
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    first = read_hub_gguf(GGUFName("org/tiny-GGUF", "UD-Q4_K_XL"))
    assert first.bytes_read > 0
    sent = dict(hub.sent)
    again = read_hub_gguf(GGUFName("org/tiny-GGUF", "UD-Q4_K_XL"))
    assert hub.sent == sent and again.bytes_read == 0, "the second use read header bytes again"
    assert again.tensors == first.tensors and again.metadata == first.metadata
    assert "kvscope's cache" in again.origin
    listed = hub.requests["info"] + hub.requests["tree"]
    offline(monkeypatch)
    cached = read_hub_gguf(GGUFName("org/tiny-GGUF", "UD-Q4_K_XL"))
    assert hub.requests["info"] + hub.requests["tree"] == listed, "offline, the Hub was asked"
    assert cached.tensors == first.tensors and "HF_HUB_OFFLINE" in cached.origin


def test_a_new_commit_is_read_again(hub, big, tmp_path):
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    read_hub_gguf(GGUFName("org/tiny-GGUF", ""))  # no tag, no Q4_K_M or Q8_0: the first model file
    other = write_gguf(tmp_path / "Tiny-8B-UD-Q4_K_XL.gguf")[0]  # re-uploaded with a small vocabulary
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", other)], sha=SHA2)
    found = read_hub_gguf(GGUFName("org/tiny-GGUF", ""))
    assert found.sha == SHA2 and found.bytes_read > 0
    assert found.headers[0].header_bytes < big.stat().st_size - sum(t.n_bytes for t in found.tensors)


def test_an_unreachable_hub_falls_back_to_the_cache(hub, big, monkeypatch):
    from huggingface_hub import constants

    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    first = read_hub_gguf(GGUFName("org/tiny-GGUF", "UD-Q4_K_XL"))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    found = read_hub_gguf(GGUFName("org/tiny-GGUF", "UD-Q4_K_XL"))
    assert found.tensors == first.tensors and "cannot be reached" in found.origin


def test_offline_without_a_cache_says_what_to_do(hub, monkeypatch):
    offline(monkeypatch)
    with pytest.raises(InputError, match=r"HF_HUB_OFFLINE is set.*run once with network"):
        read_hub_gguf(GGUFName("org/never-seen-GGUF", "Q4_K_M"))
    assert not hub.requests


def test_huggingface_hubs_own_cache_is_read_offline(hub, big, monkeypatch, big_table):
    """A file `hf download` fetched: its listing and header come from the snapshot folder, nothing from the Hub."""
    from huggingface_hub import constants

    snapshot = Path(constants.HF_HUB_CACHE) / "models--org--tiny-GGUF" / "snapshots" / SHA
    snapshot.mkdir(parents=True)
    (snapshot / big.name).symlink_to(big)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(SHA)
    offline(monkeypatch)
    found = read_hub_gguf(GGUFName("org/tiny-GGUF", "Q4_K_XL"))
    assert {t.name: (t.ggml_type, t.n_bytes) for t in found.tensors} == big_table
    assert "huggingface_hub's local cache" in found.origin and not hub.requests


def test_hub_errors_name_the_problem(hub, tmp_path):
    with pytest.raises(InputError, match="no Hugging Face repo 'org/missing-GGUF'"):
        read_hub_gguf(GGUFName("org/missing-GGUF", "Q4_K_M"))
    hub.add("org/tiny-GGUF", [("Tiny-Q8_0.gguf", write_gguf(tmp_path / "Tiny-Q8_0.gguf")[0])])
    with pytest.raises(InputError, match="no GGUF file for 'Q4_K_M'; its quants: Q8_0"):
        read_hub_gguf(GGUFName("org/tiny-GGUF", "Q4_K_M"))


def test_a_header_past_the_limit_is_refused_without_reading_it_all(hub, tmp_path, monkeypatch):
    monkeypatch.setattr("core.memory.weightfiles.MAX_GGUF_HEADER", 3 * GGUF_FIRST_READ)
    path = tmp_path / "Tiny-Q8_0.gguf"
    write_gguf(path, vocab=152_000)
    hub.add("org/tiny-GGUF", [(path.name, path)])
    with pytest.raises(InputError, match="header runs past 3 MiB"):
        read_hub_gguf(GGUFName("org/tiny-GGUF", "Q8_0"))
    assert hub.sent[path.name] <= 3 * GGUF_FIRST_READ


# ---------------------------------------------------------------- wired in: --weights-file and the model argument


def test_weights_file_takes_a_hub_name(hub, big, big_table):
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    weights = read_weights("hf.co/org/tiny-GGUF:UD-Q4_K_XL")
    table = big_table
    assert weights.kind == "gguf" and weights.total_bytes == sum(n for _, n in table.values())
    assert dict(weights.layer_bytes) == {
        i: sum(n for name, (_, n) in table.items() if name.startswith(f"blk.{i}.")) for i in (0, 1)
    }
    assert weights.embedding_bytes == table["token_embd.weight"][1]


def test_the_model_argument_takes_its_config_from_the_base_model(hub, big, big_table):
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    name, raw, origin = load_raw("org/tiny-GGUF:UD-Q4_K_XL", local_files=False)
    assert name == "org/tiny-GGUF:UD-Q4_K_XL"
    assert raw == load_raw("Qwen/Qwen3-8B")[1]
    assert "Qwen/Qwen3-8B" in origin and "general.base_model.0.repo_url" in origin and "bundled preset" in origin
    per_type = Counter()
    for kind, n in big_table.values():
        per_type[kind] += n
    assert f"({len(MIX)} tensors: {per_type.most_common(1)[0][0]} " in origin  # the mix, largest type first
    assert "warning: the GGUF has 2 layers, that config 36" in origin  # the tiny file is no real Qwen3-8B
    model = load_model("org/tiny-GGUF:UD-Q4_K_XL")
    assert any("Qwen/Qwen3-8B" in note for note in model.notes)


def test_a_base_model_named_only_by_basename_matches_a_preset(hub, tmp_path):
    path = tmp_path / "m-Q8_0.gguf"
    writer = GGUFWriter(str(path), "qwen3")
    writer.add_basename("Qwen3")
    writer.add_size_label("8B")
    writer.add_tensor("blk.0.attn_q.weight", _raw(GGMLQuantizationType.Q8_0), raw_dtype=GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    hub.add("org/q-GGUF", [(path.name, path)])
    _, raw, origin = load_raw("org/q-GGUF", local_files=False)
    assert raw == load_raw("Qwen/Qwen3-8B")[1] and "general.basename" in origin and "warning" not in origin


def test_cli_fit_reads_a_hub_gguf_end_to_end(hub, big, tmp_path, big_table):
    """`python -m core fit` as a user runs it, with HF_ENDPOINT at the fake Hub: the weights are the header's."""
    hub.add("org/tiny-GGUF", [("Tiny-8B-UD-Q4_K_XL.gguf", big)])
    table = big_table
    on_gpu = sum(n for _, n in table.values()) - table["token_embd.weight"][1]  # llama.cpp keeps it in RAM
    env = os.environ | {"HF_ENDPOINT": hub.endpoint, "HF_HUB_OFFLINE": "0", "KVSCOPE_CACHE": str(tmp_path / "kc")}
    for argv in (
        ["Qwen/Qwen3-8B", "--weights-file", "org/tiny-GGUF:UD-Q4_K_XL"],
        ["hf.co/org/tiny-GGUF:UD-Q4_K_XL"],  # the weights come with the model argument
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "core", "fit", *argv, "--gpu-mem-gib", "24", "--engine", "llama.cpp", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout)
        assert out["weights"] == "gguf file" and out["weights_bytes"] == on_gpu
    assert any("Qwen/Qwen3-8B" in note for note in out["notes"])
    assert hub.sent["Tiny-8B-UD-Q4_K_XL.gguf"] < big.stat().st_size / 5  # the header only, once (then the cache)


def test_an_app_link_never_opens_a_local_path(hub, tmp_path, monkeypatch):
    """local_files=False (the app): a GGUF-shaped name is asked of the Hub, whatever lies on the server's disk."""
    planted = tmp_path / "srv" / "x-GGUF"
    planted.mkdir(parents=True)
    write_gguf(planted / "x-Q8_0.gguf")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="no Hugging Face repo 'srv/x-GGUF'"):
        load_raw("srv/x-GGUF:Q8_0", local_files=False)
    assert hub.requests["info"] == 1 and not hub.sent


def test_a_plain_repo_id_without_safetensors_falls_back_to_its_gguf(hub, tmp_path):
    path = write_gguf(tmp_path / "m-Q8_0.gguf")[0]
    hub.add("org/plain", [(path.name, path)])
    weights = read_weights("org/plain")  # no -GGUF in the name: safetensors are looked for first
    assert weights.kind == "gguf" and weights.total_bytes == sum(n for _, n in _expected_table([path]).values())


def test_all_shards_headers_together_are_bounded(hub, tmp_path, monkeypatch):
    files = write_gguf(tmp_path / "Tiny-Q8_0.gguf", vocab=5_000, split_max_tensors=4)
    hub.add("org/split-GGUF", [(f.name, f) for f in files])
    first = files[0].stat().st_size
    assert first < GGUF_FIRST_READ  # so the first shard is read whole, in one range
    monkeypatch.setattr(gguf_hub, "HEADERS_BUDGET", first)  # the first shard's read fits, the second's does not
    with pytest.raises(InputError, match="GGUF headers together run past"):
        read_hub_gguf(GGUFName("org/split-GGUF", "Q8_0"))
    assert dict(hub.sent) == {files[0].name: first}


def test_a_config_of_another_shape_is_flagged():
    """llama.cpp writes block_count with the MTP blocks included (Qwen3.5: nextn_predict_layers beside it)."""
    meta = {"general.architecture": "qwen35", "qwen35.block_count": 33, "qwen35.nextn_predict_layers": 1}
    meta["qwen35.embedding_length"] = 4096
    config = {"text_config": {"num_hidden_layers": 32, "hidden_size": 4096}}
    assert shape_mismatch(meta, config) is None
    assert "the GGUF has 33 layers, that config 34" in shape_mismatch(meta, {"num_hidden_layers": 33})
    assert "4096 hidden size, that config 5120" in shape_mismatch(meta, {"num_hidden_layers": 32, "hidden_size": 5120})
