"""The probe results file: one JSON object per line, appended whole or not at all, the newest MAX_RECORDS kept.

Each record is written with a single `os.write` of one complete line to a file opened O_APPEND, under an exclusive
flock, so a crash or kill mid-run can neither break a line nor touch earlier ones. A line that still fails to parse
(an editor, a full disk) is skipped on read and reported, never fatal. Past MAX_RECORDS the oldest lines are dropped
by writing the rest to a new file that replaces the old in one rename, and a note beside it counts them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from core.files import write_bytes_atomic, write_json_atomic
from core.units import plural

SCHEMA_VERSION = 1
RESULTS_NAME = "probes.jsonl"
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "measurements" / "results"
# The newest records kept. The page reads and parses the whole file at each of its runs (each click), so it must not
# grow without end: a record is 1-3 KB (2.5 KB with four contexts), so 1,000 are at most ~3 MB, parsed in ~60 ms on
# this project's 2-core host. That is 20 times the 50 newest the page lists, and a probe takes minutes: months of
# runs stay for a later look.
MAX_RECORDS = 1000


def results_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """Where the results file lives: the argument, else $KVSCOPE_PROBE_DIR, else the repo's."""
    chosen = override or os.environ.get("KVSCOPE_PROBE_DIR") or DEFAULT_DIR
    return Path(chosen)


def lock_path(path: Path) -> Path:
    """The results file's writers' lock (_locked)."""
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The writers' exclusive flock, on a file beside the results (as core.speed.calibration's store takes), not on
    the results file itself: a trim replaces that, and a writer waiting on the old one's flock would then append
    to a file no longer there. An OSError where the folder cannot be written, as any other failure to save."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


@contextlib.contextmanager
def _between_writes(path: Path, wait_s: float = 2.0) -> Iterator[None]:
    """A shared flock on the writers' lock, so a read never lands mid-append and takes the line being written for a
    torn one. Waited for at most `wait_s` (an append takes milliseconds; a writer stopped while holding it must not
    hang the page), and skipped where there is no lock file to share: then a torn last line is only a warning."""
    try:
        fd = os.open(lock_path(path), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        fd = -1
    if fd < 0:
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)


def append_result(path: Path, record: dict[str, Any]) -> None:
    """Add `record` as the file's last line; past MAX_RECORDS lines, the oldest are dropped."""
    line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
    with _locked(path):
        _append(path, line)
        _trim(path)


def _append(path: Path, line: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
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
        os.close(fd)


def _trim(path: Path) -> None:
    """Keep the newest MAX_RECORDS lines (held under the writers' lock). They go whole to a new file that replaces
    the old in one rename, so a reader sees the one or the other; a trim that cannot be written leaves the file as
    it was, one line longer, for the next append to trim."""
    lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
    dropped = len(lines) - MAX_RECORDS
    if dropped > 0 and write_bytes_atomic(path, b"\n".join(lines[dropped:]) + b"\n"):
        note = _trim_note_path(path)
        before = _read_trimmed(note)
        total = dropped + (before.get("dropped", 0) if before else 0)
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        write_json_atomic(note, {"dropped": total, "kept": MAX_RECORDS, "last": stamp})  # only a note: False is fine


def _trim_note_path(path: Path) -> Path:
    return path.with_name(path.name + ".trimmed.json")


def _read_trimmed(note: Path) -> dict[str, Any] | None:
    """The trim note's fields, None when there is none or it cannot be read."""
    try:
        data = json.loads(note.read_bytes())
    except (OSError, ValueError):
        return None
    ok = isinstance(data, dict) and all(isinstance(data.get(k), int) for k in ("dropped", "kept"))
    return data if ok else None


def trim_note(path: str | os.PathLike[str]) -> str | None:
    """What the page says when older runs were dropped from the results file; None when none were."""
    path = Path(path)
    note = _trim_note_path(path)
    if not note.exists():
        return None
    data = _read_trimmed(note)
    if data is None:
        dropped, kept, last = "older runs", MAX_RECORDS, f"{note.name}, which counts them, cannot be read"
    else:
        dropped, kept = plural(data["dropped"], "older run", f"{data['dropped']:,}"), data["kept"]
        last = f"the last on {data.get('last')}"
    return f"{path.name} keeps the newest {kept:,} runs: {dropped} dropped ({last})."


def load_results(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """(records, warnings): every line that parses as a JSON object, and one warning per line that does not."""
    path = Path(path)
    try:
        with _between_writes(path):
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
