"""The published speed corpus (measurements/speed/corpus): every row parses against the schema, names a card
kvscope knows (or a CPU), cites a URL, is not a duplicate, maps `model_id` to a config whose parameter count
matches what the engine printed, and the corpus is as broad as issue 19 asks."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from core.memory.gpus import cards
from core.model.loading import load_model, model_from_config, preset_path
from core.model.params import count_params

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "measurements" / "speed" / "corpus"
REFERENCE = ROOT.parent / "shared" / "reference"  # the project's shared configs (configs*/org__name.json), beside it

FIELDS = {
    "source": str,
    "source_id": str,
    "engine": str,
    "build": (str, type(None)),
    "backend": str,
    "card": str,
    "n_devices": int,
    "model": str,
    "model_id": (str, type(None)),
    "weights": str,
    "size_bytes": (int, type(None)),
    "params": (int, type(None)),
    "kind": str,
    "test": str,
    "n_prompt": int,
    "n_gen": int,
    "depth": int,
    "n_batch": (int, type(None)),
    "n_ubatch": (int, type(None)),
    "flash_attn": (bool, type(None)),
    "threads": (int, type(None)),
    "ngl": (int, type(None)),
    "concurrency": int,
    "tok_s": float,
    "tok_s_std": (float, type(None)),
    "notes": str,
}
# CPU rows may add the machine's RAM copy bandwidth (tests/bench/fit_cpu.py: one thread's copy, read + written bytes
# per second, as core.speed.ram measures it) and where that figure comes from
CPU_FIELDS = {"ram_copy_gb_s": float, "ram_source": str}
# any row may add: `eager`, true where the engine ran each step's kernels one by one without CUDA graphs (vLLM's
# --enforce-eager, or a vLLM from before graph capture); `driver`, a Vulkan row's driver as ggml-vulkan's device line
# prints it in its last parentheses ("radv", "AMD proprietary driver", "Intel open-source Mesa driver", ...);
# `sbc_host`, true where the card sat in a single-board computer (a Raspberry Pi's one PCIe lane and Arm cores)
OPTIONAL_FIELDS = {"eager": bool, "driver": str, "sbc_host": bool}
ENGINES = {"llama.cpp", "vllm", "mlx", "ollama"}
BACKENDS = {"cuda", "rocm", "vulkan", "metal", "cpu", "sycl"}
URL = re.compile(r"^https://[\w.-]+\.[a-z]{2,}/\S+$")
BATCHED_BENCH = "llama-batched-bench"  # in a test name: its decode of several sequences at once (`concurrency`)
# llama-bench's test names: pp512, tg128, pp512 @ d4096 (a source's own label may follow in parentheses)
TEST = re.compile(r"^(pp(?P<p>\d+)|tg(?P<g>\d+))( @ d(?P<d>\d+))?( \(.+\))?$")


def _rows() -> list[tuple[str, int, dict]]:
    out = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            out.append((path.name, i, json.loads(line)))
    return out


ROWS = _rows()


def _where(file: str, line: int) -> str:
    return f"{file}:{line}"


@cache
def _config_params(model_id: str) -> int:
    """Parameters of the config kvscope loads for a model id: a bundled preset, else the shared reference copy."""
    if preset_path(model_id) is not None:
        return count_params(load_model(model_id)).total
    name = model_id.replace("/", "__", 1) + ".json"
    # the shared reference copy, else the corpus' own (configs only the corpus needs)
    found = sorted(REFERENCE.glob(f"configs*/{name}")) or sorted(CORPUS.glob(f"configs/{name}"))
    assert found, f"{model_id}: neither a bundled preset nor {REFERENCE}/configs*/{name} nor {CORPUS}/configs/{name}"
    return count_params(model_from_config(json.loads(found[0].read_text()), model_id)).total


def test_every_row_has_the_schema_fields_and_types():
    assert ROWS, f"no rows under {CORPUS}"
    for file, line, row in ROWS:
        where = _where(file, line)
        extra = set(CPU_FIELDS) if row.get("backend") == "cpu" and "ram_copy_gb_s" in row else set()
        extra |= set(OPTIONAL_FIELDS) & set(row)
        assert set(row) == set(FIELDS) | extra, f"{where}: fields differ: {set(row) ^ (set(FIELDS) | extra)}"
        for key, kind in (FIELDS | {k: (CPU_FIELDS | OPTIONAL_FIELDS)[k] for k in extra}).items():
            assert isinstance(row[key], kind), f"{where}: {key}={row[key]!r} is not {kind}"
            assert not (kind is int and isinstance(row[key], bool)), f"{where}: {key} is a bool"
        assert row["engine"] in ENGINES, where
        assert row["backend"] in BACKENDS, where
        assert row["model"] and row["weights"] and row["source_id"], where
        # a file holds one source; its source_id may split it further (one per model run)
        assert row["source_id"].startswith(file.removesuffix(".jsonl")), f"{where}: source_id {row['source_id']}"


def test_eager_and_driver_are_where_they_mean_something():
    """`eager` marks vLLM runs only, and every run whose notes give its server --enforce-eager carries it (the fit
    drops such decodes by the field, so a row transcribed without it would be fitted as a run with CUDA graphs);
    `driver` marks Vulkan runs only; a GPU run whose notes name a Raspberry Pi host carries `sbc_host` (the fit
    leaves those out)."""
    for file, line, row in ROWS:
        where = _where(file, line)
        if "eager" in row:
            assert row["engine"] == "vllm" and row["eager"] is True, f"{where}: eager on a non-vLLM row, or false"
        if row["engine"] == "vllm" and "--enforce-eager" in row["notes"]:
            assert row.get("eager") is True, f"{where}: its notes name --enforce-eager but the row has no eager: true"
        if "driver" in row:
            assert row["backend"] == "vulkan" and row["driver"], f"{where}: driver on a {row['backend']} row"
        if "sbc_host" in row:
            assert row["sbc_host"] is True and row["backend"] != "cpu", f"{where}: sbc_host false, or on a CPU row"
        if "Raspberry Pi" in row["notes"] and row["backend"] != "cpu":
            assert row.get("sbc_host"), f"{where}: its notes name a Raspberry Pi host but the row has no sbc_host"


def test_test_name_kind_and_token_counts_agree():
    for file, line, row in ROWS:
        where = _where(file, line)
        m = TEST.match(row["test"])
        assert m, f"{where}: test {row['test']!r} is not llama-bench's pp<N>/tg<N>[ @ d<N>]"
        if m["p"]:
            assert row["kind"] == "prefill" and row["n_prompt"] == int(m["p"]) and row["n_gen"] == 0, where
        else:
            assert row["kind"] == "decode" and row["n_gen"] == int(m["g"]) and row["n_prompt"] == 0, where
        assert row["depth"] == int(m["d"] or 0), f"{where}: depth {row['depth']} vs test {row['test']}"


def test_values_are_physical():
    for file, line, row in ROWS:
        where = _where(file, line)
        assert 0 < row["tok_s"] < 100_000, where
        assert row["tok_s_std"] is None or 0 <= row["tok_s_std"] < row["tok_s"], where
        assert row["n_devices"] >= 1 and row["concurrency"] >= 1 and row["depth"] >= 0, where
        assert row["size_bytes"] is None or row["size_bytes"] > 10**8, where
        if row["engine"] == "llama.cpp" and BATCHED_BENCH not in row["test"]:
            assert row["concurrency"] == 1, f"{where}: llama-bench runs one sequence"
        if BATCHED_BENCH in row["test"]:  # llama-batched-bench's decode of `concurrency` sequences, tok_s per sequence
            assert row["engine"] == "llama.cpp" and row["kind"] == "decode", where


def test_sources_are_urls():
    for file, line, row in ROWS:
        assert URL.match(row["source"]), f"{_where(file, line)}: source {row['source']!r} is not a URL"


def test_cards_exist_in_gpus_csv_or_are_cpus():
    known = cards()
    for file, line, row in ROWS:
        if row["backend"] != "cpu":
            assert row["card"] in known, f"{_where(file, line)}: card {row['card']!r} is not in gpus.csv"
        else:
            assert row["card"] not in known, f"{_where(file, line)}: a CPU row names a GPU card"


def test_no_duplicate_rows():
    """Two rows that agree on everything but the figure would be one measurement told twice (or two that
    contradict each other)."""
    seen: dict[tuple, str] = {}
    for file, line, row in ROWS:
        key = tuple((k, row[k]) for k in sorted(row) if k not in ("tok_s", "tok_s_std"))
        assert key not in seen, f"{_where(file, line)} repeats {seen[key]}"
        seen[key] = _where(file, line)


@pytest.mark.parametrize("model_id", sorted({r["model_id"] for _, _, r in ROWS if r["model_id"]}))
def test_model_ids_load_with_the_printed_parameter_count(model_id):
    """The config a row points at must be the model that ran: its parameter count matches the engine's print."""
    total = _config_params(model_id)
    printed = {r["params"] for _, _, r in ROWS if r["model_id"] == model_id and r["params"]}
    assert printed, f"{model_id}: no row prints a parameter count to check the mapping against"
    for params in printed:
        assert abs(total - params) <= 0.01 * params, (
            f"{model_id}: config has {total:,} parameters, a row printed {params:,}"
        )


def test_corpus_is_as_broad_as_issue_19_asks():
    rows = [r for _, _, r in ROWS]
    gpu_backends = {r["backend"] for r in rows} - {"cpu"}
    kinds = Counter(r["kind"] for r in rows)
    decode_depths = {r["depth"] for r in rows if r["kind"] == "decode"}
    prefill_depths = {r["depth"] for r in rows if r["kind"] == "prefill"}
    cards_used = {r["card"] for r in rows if r["backend"] != "cpu"}
    assert len(rows) >= 300, len(rows)
    assert len(cards_used) >= 25, sorted(cards_used)
    assert len(gpu_backends) >= 4, gpu_backends
    assert any(r["backend"] == "cpu" for r in rows), "no CPU rows"
    assert kinds["prefill"] >= 50 and kinds["decode"] >= 50, kinds
    assert len(decode_depths) >= 4 and len(prefill_depths) >= 4, (decode_depths, prefill_depths)
    assert len({r["source_id"] for r in rows}) >= 10, "too few independent sources to hold some out"


def test_the_hand_transcribed_tables_are_what_the_extractor_writes():
    """extract.py rebuilds every file (README): a hand-transcribed table's file edited after it was written (a
    model_id, a published RAM copy) would be lost to the next rebuild, so each equals what hand_tables() builds."""
    spec = importlib.util.spec_from_file_location("corpus_extract", CORPUS / "extract.py")
    extract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extract)
    tables = extract.hand_tables()
    assert len(tables) >= 10, sorted(tables)
    for slug, built in tables.items():
        on_disk = [row for file, _, row in ROWS if file == f"{slug}.jsonl"]
        assert on_disk == built, f"{slug}.jsonl differs from extract.py's table: rebuild it or move the edit there"
