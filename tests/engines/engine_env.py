"""Where the real engines live: the virtualenv `make engines` builds (tests/engines/install.sh).

The referee tests fail, never skip, when it is missing: a skipped referee would pass a wrong rule.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINES_VENV = Path(os.environ.get("KVSCOPE_ENGINES_VENV", ROOT / ".venv-engines"))
ENGINES_PYTHON = ENGINES_VENV / "bin" / "python"
LLAMACPP_TREE = ENGINES_VENV / "llama.cpp"  # convert_hf_to_gguf.py, conversion/, gguf-py/ from the same sdist


def engines_python() -> Path:
    if not ENGINES_PYTHON.exists():
        pytest.fail(f"the engines' virtualenv is missing ({ENGINES_VENV}); run `make engines` (or `make test`)")
    return ENGINES_PYTHON


def run_in_engines(args: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run a command with the engines' Python, offline, and fail the test with its output if it fails."""
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    full_env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(engines_python()), *args], capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT
    )
    if proc.returncode != 0:
        output = f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        pytest.fail(f"{' '.join(args[:2])} failed (exit {proc.returncode}):\n{output}")
    return proc


def convert_tiny(folder: Path, models: dict[str, dict], timeout: float = 300) -> dict[str, str]:
    """Tiny random-weight checkpoints of `models` (name: raw config.json) converted by llama.cpp's own converter
    (llamacpp_gguf.py) into `folder`: {name: gguf path}."""
    (folder / "build.json").write_text(
        json.dumps({"tree": str(LLAMACPP_TREE), "out_dir": str(folder), "models": models})
    )
    built = run_in_engines([str(Path(__file__).parent / "llamacpp_gguf.py"), str(folder / "build.json")], timeout)
    ggufs = json.loads(built.stdout.strip().splitlines()[-1])
    assert set(ggufs) == set(models), sorted(set(models) - set(ggufs))
    return ggufs
