"""`python -m core` answers a bundled preset, or a config it has resolved before, without importing torch or
transformers (2+ s of a 3 s command). Checked on the real entry point with `-X importtime`; the time itself is
measured in tests/bench/bench_cli.py, never here."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.tiny_configs import tiny_raw

HEAVY = ("torch", "transformers")


def run_cli(args: list[str], cache) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The command's result and the top-level packages it imported."""
    env = os.environ | {"KVSCOPE_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "core", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    # importtime lines: "import time: self [us] | cumulative | <indent>package.module"
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines}
    assert "core" in imported, "importtime output not parsed: the check below would pass vacuously"
    return proc, imported


@pytest.mark.parametrize(
    "args",
    [
        ["fit", "Qwen/Qwen3.5-9B", "--gpu-mem-gib", "8"],
        ["fit", "google/gemma-3-12b-it", "--gpu", "RTX 4090", "--engine", "vllm", "--json"],
        ["size", "ai21labs/Jamba-v0.1", "--context", "32k"],
    ],
)
def test_a_bundled_preset_imports_neither_torch_nor_transformers(tmp_path, args):
    proc, imported = run_cli(args, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert args[1].split("/")[1] in proc.stdout
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
    assert not (tmp_path / "cache").exists(), "a shipped preset must not be re-resolved into the cache"


def test_a_config_resolved_once_is_answered_from_the_cache_next_time(tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps(tiny_raw("qwen3_5_text")))
    args = ["size", str(config), "--context", "4k", "--json"]
    first, imported_first = run_cli(args, tmp_path / "cache")
    assert first.returncode == 0, first.stderr[-2000:]
    assert "transformers" in imported_first  # a miss: resolved in-process, then kept on disk
    assert list((tmp_path / "cache" / "resolved").glob("*.json"))
    second, imported_second = run_cli(args, tmp_path / "cache")
    assert second.returncode == 0, second.stderr[-2000:]
    assert not imported_second & set(HEAVY), sorted(imported_second & set(HEAVY))
    assert json.loads(second.stdout) == json.loads(first.stdout)


def test_cached_resolution_equals_a_fresh_one(tmp_path, monkeypatch):
    """What the cache returns on a hit is exactly what `resolve` gives (as JSON), for a preset and a new config."""
    import copy

    import core.model.config
    from core.model.loading import load_raw

    monkeypatch.setattr(core.model.config, "_CACHE_DIR", tmp_path)
    for raw in (load_raw("Qwen/Qwen3.5-9B")[1], tiny_raw("granitemoehybrid")):
        before = copy.deepcopy(raw)
        fresh = json.loads(json.dumps(core.model.config.resolve(raw)))
        assert raw == before  # transformers edits nested dicts in place; resolve must not pass that on
        assert core.model.config.resolve_cached(raw) == fresh  # a shipped hit, or a miss that writes the cache
        assert core.model.config.resolve_cached(raw) == fresh  # a hit
    assert len(list(tmp_path.glob("*.json"))) == 1  # only the config that was not shipped
