"""`python -m core size`: the command-line contract, run as a user would (a subprocess, offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "core", *args], capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture(scope="module")
def qwen35() -> dict:
    proc = run_cli("size", "Qwen/Qwen3.5-9B", "--json", "--context", "8k", "--context", "262144")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_qwen35_9b_attention_bytes_per_token(qwen35):
    # 8 full-attention layers × (K + V) × 4 KV heads × 256 wide × 2 bytes (bf16)
    assert qwen35["kv_bytes_per_token"] == 8 * 2 * 4 * 256 * 2 == 32_768
    assert qwen35["layers"] == {"gated_deltanet": 24, "full_attention": 8}


def test_qwen35_9b_gated_deltanet_state_as_transformers_stores_it(qwen35):
    # per layer: conv over 2·16·128 + 32·128 = 8192 channels × 4 columns in bf16, recurrent 32 × 128 × 128 in fp32
    per_layer = 8192 * 4 * 2 + 32 * 128 * 128 * 4
    assert qwen35["fixed_bytes_per_sequence"] == 24 * per_layer == 51_904_512
    assert qwen35["state_dtypes"] == {"conv": "bf16", "ssm": "fp32", "linear": "bf16"}


def test_qwen35_9b_cache_at_each_context(qwen35):
    by_context = {row["context"]: row["cache_bytes"] for row in qwen35["contexts"]}
    assert by_context == {8192: 51_904_512 + 8192 * 32_768, 262144: 51_904_512 + 262144 * 32_768}


def test_qwen3_8b_bytes_per_token():
    proc = run_cli("size", "Qwen/Qwen3-8B", "--json")
    out = json.loads(proc.stdout)
    assert out["kv_bytes_per_token"] == 36 * 2 * 8 * 128 * 2 == 147_456
    assert out["fixed_bytes_per_sequence"] == 0
    assert out["engine"] == "transformers" and out["kv_dtype"] == "bf16"


def test_batch_and_fp32_scale_the_cache():
    base = json.loads(run_cli("size", "Qwen/Qwen3-8B", "--json", "--context", "1000").stdout)
    more = json.loads(
        run_cli("size", "Qwen/Qwen3-8B", "--json", "--context", "1000", "--batch", "3", "--kv-dtype", "fp32").stdout
    )
    assert more["contexts"][0]["cache_bytes"] == 3 * 2 * base["contexts"][0]["cache_bytes"]


def test_readable_table_uses_binary_units():
    proc = run_cli("size", "Qwen/Qwen3.5-9B", "--context", "32k")
    assert proc.returncode == 0
    assert "32.00 KiB" in proc.stdout and "49.50 MiB" in proc.stdout and "1.05 GiB" in proc.stdout


def test_config_path_and_sliding_window_cap(tmp_path):
    cfg = {
        "model_type": "mistral",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "sliding_window": 1000,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = json.loads(run_cli("size", str(path), "--json", "--context", "500", "--context", "5000").stdout)
    per_token = 2 * 2 * 2 * 16 * 2
    assert [r["cache_bytes"] for r in out["contexts"]] == [500 * per_token, 999 * per_token]
    assert out["notes"] == ["the config names no dtype; bf16 assumed"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["size", "no/such-model"], "no/such-model: the Hub cannot be reached"),
        (["size", "Qwen/Qwen3-8B", "--kv-dtype", "q3_k"], "KV dtype"),
        (["size", "Qwen/Qwen3-8B", "--engine", "tgi"], "invalid choice"),
        (["size", "Qwen/Qwen3-8B", "--context", "-5"], "positive"),
        (["size", "Qwen/Qwen3-8B", "--context", "lots"], "token count"),
        (["size", "/nonexistent/config.json"], "no file"),
    ],
)
def test_errors_are_one_clear_line_without_traceback(args, message):
    proc = run_cli(*args)
    assert proc.returncode != 0
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_reader_that_closes_early_gets_no_traceback():
    """`python -m core fit … | head -1`: the pipe closes before the table is written."""
    env = os.environ | {"HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "core", "fit", "Qwen/Qwen3-8B", "--gpu-mem-gib", "24"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    proc.stdout.close()  # before the interpreter has started, so every write meets a closed pipe
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err.decode(), err.decode()
    assert proc.returncode == 0


def test_fit_text_table_shows_each_contexts_overhead_so_its_totals_add_up():
    """transformers' overhead grows with the context: the header's figure is the first row's, the column each row's,
    and each total is the weights plus that row's cache and overhead."""
    args = ("fit", "google/gemma-3-12b-it", "--gpu", "RTX 4090", "--engine", "transformers", "--context", "4k",
            "--context", "16k")  # fmt: skip
    text, data = run_cli(*args), run_cli(*args, "--json")
    assert text.returncode == 0 and data.returncode == 0, text.stderr + data.stderr
    out = json.loads(data.stdout)
    rows = out["contexts"]
    assert rows[0]["overhead_bytes"] < rows[1]["overhead_bytes"]
    for r in rows:
        assert r["total_bytes"] == out["weights_bytes"] + r["cache_bytes"] + r["overhead_bytes"]
    lines = text.stdout.splitlines()
    assert "KV budget" in lines[1] and "at 4K (the overhead column: at each context)" in lines[1]
    header = next(line for line in lines if line.split()[:2] == ["context", "cache"])
    assert header.split()[:4] == ["context", "cache", "overhead", "total"]
