"""The probe results file: one JSON object per line, appended whole or not at all.

Each record is written with a single `os.write` of one complete line to a file opened O_APPEND, under an exclusive
flock, so a crash or kill mid-run can neither break a line nor touch earlier ones. A line that still fails to parse
(an editor, a full disk) is skipped on read and reported, never fatal.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RESULTS_NAME = "probes.jsonl"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "measurements" / "results"


def results_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where the results file and the probe lock live: the argument, else $KVSCOPE_PROBE_DIR, else the repo's."""
    chosen = override or os.environ.get("KVSCOPE_PROBE_DIR") or DEFAULT_DIR
    return Path(chosen)


def append_result(path: Path, record: dict[str, Any]) -> None:
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size:
            # A torn tail left by something else must not swallow our line: start on a fresh one.
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    line = b"\n" + line
        try:
            written = os.write(fd, line)
            if written != len(line):
                raise OSError(f"short write to {path} ({written} of {len(line)} bytes)")
            os.fsync(fd)
        except OSError:
            # A full disk can take part of the line: cut the file back to what it held, so it stays whole.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)  # closing releases the flock


def load_results(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(records, warnings): every line that parses as a JSON object, and one warning per line that does not."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], []
    except OSError as err:  # a folder in its place, no permission: the page says so and keeps working
        return [], [f"{path} cannot be read ({err.strerror or err}); past runs are not shown"]
    rows: list[dict[str, Any]] = []
    warnings: list[str] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            warnings.append(f"{path.name} line {number} skipped: not valid JSON ({err})")
            continue
        if not isinstance(row, dict):
            warnings.append(f"{path.name} line {number} skipped: a JSON {type(row).__name__}, not an object")
            continue
        problem = _record_problem(row)
        if problem:
            warnings.append(f"{path.name} line {number} skipped: {problem}")
            continue
        rows.append(row)
    return rows, warnings


def _record_problem(row: dict[str, Any]) -> str | None:
    """Why a parsed line (edited by hand, or from elsewhere) cannot be shown as a past run; None if it can."""
    measured = row.get("measured", [])
    if not isinstance(measured, list) or not all(isinstance(m, dict) for m in measured):
        return "'measured' is not a list of objects"
    for m in measured:
        context = m.get("context")
        if isinstance(context, bool) or not isinstance(context, int) or context <= 0:
            return f"a measured context is {context!r}, not a positive token count"
        ratio = m.get("ratio")
        if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, int | float)):
            return f"a measured ratio is {ratio!r}, not a number"
    for key in ("time", "model", "gpu", "status"):
        if not isinstance(row.get(key), str | None):
            return f"'{key}' is {row.get(key)!r}, not text"
    return None
