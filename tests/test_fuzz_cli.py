"""Hostile and random input to `python -m core`: every case ends in one `error:` line on stderr and exit status 2,
fast: no traceback, no hang, no MemoryError or RecursionError, and nothing of a file's content echoed.

Most cases call the CLI's own main() in this process (transformers is imported once); the three that used to kill
the interpreter (10^12 layers, 100,000-deep nesting, non-UTF-8) also run as a real `python -m core` process.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.cli import main
from core.model.config import MAX_CONFIG_BYTES
from tests.conftest import ROOT
from tests.tiny_configs import TINY, tiny_raw

CASE_S = 20.0  # a generous bound on one case on a loaded two-core machine; each takes well under a second


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    start = time.monotonic()
    rc = main(list(argv))
    assert time.monotonic() - start < CASE_S, f"{argv} took {time.monotonic() - start:.1f} s"
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error_line(rc: int, err: str) -> str:
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def _write(tmp_path: Path, name: str, content: str | bytes) -> str:
    path = tmp_path / name
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(path)


LLAMA = tiny_raw("llama")
KIMI = tiny_raw("deepseek_v3") | {"model_type": "kimi_k2"}
HOSTILE = {
    "layers_10e12": (json.dumps(LLAMA | {"num_hidden_layers": 10**12}), "num_hidden_layers"),
    "layers_10e12_text_config": (
        json.dumps({"model_type": "llava", "text_config": LLAMA | {"num_hidden_layers": 10**12}}),
        "num_hidden_layers",
    ),
    "nested_100k": ("[" * 100_000 + "]" * 100_000, "nested"),
    "nested_object_60": (json.dumps({"model_type": "llama", "x": json.loads("[" * 60 + "]" * 60)}), "nested"),
    "non_utf8": (b"\xff\xfe\x00{\x00}", "UTF-8"),
    "latin1": ('{"model_type": "llama", "name": "caf\xe9"}'.encode("latin-1"), "UTF-8"),
    "empty": ("", "not valid JSON"),
    "array": ("[1, 2]", "not an object"),
    "no_model_type": (json.dumps({"hidden_size": 64}), "model_type"),
    "model_type_number": (json.dumps(LLAMA | {"model_type": 7}), "model_type"),
    "unknown_model_type": (json.dumps(LLAMA | {"model_type": "../../etc/passwd"}), "unknown model_type"),
    "nan_layers": ('{"model_type": "llama", "num_hidden_layers": NaN, "hidden_size": 64}', "num_hidden_layers"),
    "inf_hidden": (json.dumps(LLAMA | {"hidden_size": math.inf}), "hidden_size"),
    "negative_heads": (json.dumps(LLAMA | {"num_key_value_heads": -2}), "num_key_value_heads"),
    "string_layers": (json.dumps(LLAMA | {"num_hidden_layers": "2"}), "num_hidden_layers"),
    "bool_layers": (json.dumps(LLAMA | {"num_hidden_layers": True}), "num_hidden_layers"),
    "huge_vocab": (json.dumps(LLAMA | {"vocab_size": 10**30}), "vocab_size"),
    # kimi_k2 is sized from its raw fields (transformers does not know it), so nothing fills a missing one in
    "missing_field": (
        json.dumps({k: v for k, v in KIMI.items() if k != "kv_lora_rank"}),
        "kv_lora_rank",
    ),
    "layer_types_wrong": (json.dumps(LLAMA | {"layer_types": ["warp_drive", "full_attention"]}), "layer"),
    "layer_types_string": (json.dumps(LLAMA | {"layer_types": "full_attention"}), ""),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_config_is_one_error_line(tmp_path, capsys, name):
    content, phrase = HOSTILE[name]
    rc, out, err = run_cli(capsys, "size", _write(tmp_path, "config.json", content))
    line = assert_one_error_line(rc, err)
    assert phrase.lower() in line.lower()
    assert out == ""


def test_a_file_past_the_size_limit_is_refused_unread(tmp_path, capsys):
    path = tmp_path / "config.json"
    with path.open("wb") as f:  # sparse: the test does not write 4 MiB
        f.truncate(MAX_CONFIG_BYTES + 1)
    rc, _, err = run_cli(capsys, "size", str(path))
    assert "too large" in assert_one_error_line(rc, err)


def test_a_file_on_the_machine_is_not_echoed(capsys):
    """The command line may read local paths (it runs as its user), but says only that they are not configs."""
    passwd = Path("/etc/passwd")
    first = passwd.read_text().splitlines()[0]
    rc, _, err = run_cli(capsys, "size", str(passwd))
    assert "not valid JSON" in assert_one_error_line(rc, err)
    assert first not in err and "root:" not in err


ODD_IDS = [
    "../",
    "../../etc/passwd",
    "/",
    "/etc",
    "/nonexistent/x.json",
    "https://example.com/Qwen/Qwen3-8B",  # (huggingface.co/Qwen/Qwen3-8B is the preset's page: test_cli_round3)
    "https://huggingface.co/Qwen/Qwen3-8B/tree/main",
    "Qwén/模型",
    "org/name; rm -rf /",
    "$(id)/x",
    "a/b`id`",
    "a|b/c",
    "a--b/c",
    "a/b/c",
    "",
    "   ",
    "\x00/x",
]


@pytest.mark.parametrize("repo", ODD_IDS)
def test_odd_repo_ids_are_one_error_line(capsys, repo):
    rc, _, err = run_cli(capsys, "size", repo)
    assert_one_error_line(rc, err)


@pytest.mark.parametrize("value", ["999999999999999999999", "-5", "1e9", "NaN", "12 tokens", "0"])
def test_bad_context_is_an_argparse_error(capsys, value):
    with pytest.raises(SystemExit) as exc:
        main(["size", "Qwen/Qwen3-8B", "--context", value])
    assert exc.value.code == 2
    _, err = capsys.readouterr()
    assert "argument --context" in err and "Traceback" not in err


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**15), 10**15) | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(TINY)),
    st.dictionaries(
        st.sampled_from(sorted({k for cfg in TINY.values() for k in cfg} | set(tiny_raw("llama")) | {"extra"})),
        JSON_VALUES,
        max_size=4,
    ),
    st.sets(st.sampled_from(sorted(set(tiny_raw("llama")) - {"model_type"})), max_size=2),
)
def test_random_configs_size_or_fail_cleanly(tmp_path_factory, model_type, changes, dropped):
    """Fields replaced by random JSON values (wrong types, NaN, negatives, huge numbers, nesting) or left out:
    the CLI sizes the config or prints one error line; never a traceback."""
    raw = {k: v for k, v in (tiny_raw(model_type) | changes).items() if k not in dropped}
    path = tmp_path_factory.mktemp("fuzz") / "config.json"
    path.write_text(json.dumps(raw))
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["size", str(path), "--json"])
    assert time.monotonic() - start < CASE_S
    if rc == 0:
        assert json.loads(out.getvalue())["contexts"]
    else:
        assert_one_error_line(rc, _without_library_chatter(err.getvalue()))


COMMANDS = {
    "cluster": ["--gpu", "H100", "--nodes", "2", "--context", "256"],
    "autofit": ["--gpu", "RTX 4060 8GB"],
    "ollama": ["--gpu", "RTX 4060 8GB"],
}


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(sorted(COMMANDS)),
    st.sampled_from(sorted(TINY)),
    st.dictionaries(
        st.sampled_from(sorted({k for cfg in TINY.values() for k in cfg} | set(tiny_raw("llama")))),
        JSON_VALUES,
        max_size=3,
    ),
)
def test_planners_answer_or_fail_cleanly(tmp_path_factory, command, model_type, changes):
    """The cluster planner, llama.cpp's fit and the Ollama report on random configs: an answer or one error line."""
    path = tmp_path_factory.mktemp("fuzz") / "config.json"
    path.write_text(json.dumps(tiny_raw(model_type) | changes))
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([command, str(path), *COMMANDS[command], "--json"])
    assert time.monotonic() - start < CASE_S
    if rc == 0:
        assert json.loads(out.getvalue())
    else:
        assert_one_error_line(rc, _without_library_chatter(err.getvalue()))


def _without_library_chatter(err: str) -> str:
    """transformers logs warnings about odd-but-accepted fields before rejecting others; those are not ours."""
    return "\n".join(line for line in err.splitlines() if not line.startswith("[transformers]") and line.strip())


@pytest.mark.parametrize("name", ["layers_10e12", "nested_100k", "non_utf8"])
def test_the_old_crashes_in_a_real_process(tmp_path, name):
    content, phrase = HOSTILE[name]
    path = _write(tmp_path, "config.json", content)
    proc = subprocess.run(
        [sys.executable, "-m", "core", "size", path], capture_output=True, text=True, timeout=CASE_S * 3, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ") and phrase in proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr
