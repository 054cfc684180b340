"""Files: reading one a user names, safely (only regular files: a FIFO would block forever, /dev/zero never ends, a
directory is not content; never more bytes than the caller's limit), kvscope's own cache folder, and this host's
measuring lock (one probe or calibration at a time)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from core.errors import InputError
from core.units import format_bytes


def open_regular(path: Path, what: str) -> tuple[BinaryIO, int]:
    """(an open binary file, its size) for a regular file; anything else is an InputError naming `what`.

    The path is checked before opening (opening some devices has effects of its own), then opened without
    blocking (a FIFO swapped in meanwhile cannot stall the open) and checked again on the open descriptor."""
    try:
        before = os.stat(path)
    except OSError as err:
        raise InputError(f"cannot read {what} {path}: {err.strerror or err}") from None
    _check_regular(before, path, what)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise InputError(f"cannot read {what} {path}: {err.strerror or err}") from None
    try:
        after = os.fstat(fd)
        _check_regular(after, path, what)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # a regular file never blocks; plain reads are simpler to reason about
        return os.fdopen(fd, "rb"), after.st_size
    except BaseException:
        os.close(fd)
        raise


def _check_regular(info: os.stat_result, path: Path, what: str) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path} is a folder, not {what}")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file (a pipe or a device?), so it cannot be {what}")


def read_regular_file(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes: a larger one (or a pipe, a device, a folder) is refused
    before anything is read, and at most limit + 1 bytes are ever read (a file that grows meanwhile is refused too)."""
    f, size = open_regular(path, what)
    with f:
        if size > limit:
            raise InputError(f"{path} is {format_bytes(size)}, too large to be {what} (limit {format_bytes(limit)})")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise InputError(f"{path} grew past {format_bytes(limit)} while it was read, too large to be {what}")
    return data


def engines_venv_python() -> Path:
    """The python of the engines' virtualenv (`make engines`: llama-cpp-python, vLLM's CPU build), which may not
    exist: KVSCOPE_ENGINES_VENV, else this checkout's .venv-engines."""
    checkout = Path(__file__).resolve().parents[1]
    return Path(os.environ.get("KVSCOPE_ENGINES_VENV") or checkout / ".venv-engines") / "bin" / "python"


def cache_dir() -> Path:
    """kvscope's cache folder: $KVSCOPE_CACHE, else ~/.cache/kvscope (resolved configs, GGUF headers, this host's
    RAM bandwidth and calibration). Read at each call, so a test's folder holds everything it writes."""
    return Path(os.environ.get("KVSCOPE_CACHE") or Path.home() / ".cache" / "kvscope")


def open_lock(path: Path, what: str, env: str, mode: int = 0o666) -> int:
    """A read-write fd on the lock file `path`, its folder made first, for an flock. Where the folder cannot be
    written, an InputError naming it, `what` it holds and the variable `env` that moves it: said before any work,
    whose results could not be saved there either."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, mode)
    except OSError as err:
        raise InputError(
            f"cannot write to {path.parent} ({err.strerror or err}), where {what}; set {env} to a writable folder"
        ) from None


MEASURING_WHERE = "kvscope keeps this host's measuring lock"  # open_lock's words for it


def measuring_lock() -> Path:
    """This host's measuring lock (measuring()). In kvscope's cache folder, so every process of this user on this
    host finds it (the app's servers, the command line); named after the host, so a home folder several hosts share
    keeps each host's runs apart."""
    return cache_dir() / f"measuring-{socket.gethostname()}.lock"


@contextlib.contextmanager
def measuring(holder: dict[str, Any], busy: type[Exception]) -> Iterator[int]:
    """Hold this host's measuring lock while a probe or a calibration runs (two at once would each time the other's
    load), or raise `busy` saying what holds it and how to stop it. An flock taken without waiting, which the kernel
    drops when every process holding it has ended, so a crash never leaves it held; a child given the fd holds it
    too. `holder` (say_measuring) names this run to the next one. Yields the fd."""
    fd = open_lock(measuring_lock(), MEASURING_WHERE, "KVSCOPE_CACHE")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy(_busy_message(os.pread(fd, 1 << 16, 0))) from None
        say_measuring(fd, holder)
        yield fd
    finally:
        os.close(fd)  # closing releases the flock (once any child given it has ended too)


def say_measuring(fd: int, holder: dict[str, Any]) -> None:
    """Write what holds the lock into it: "running" (what, by which process, since when) and "stop" (how to end
    it) for the refusal, beside any field its owner reads back."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(holder).encode(), 0)


BUSY = "busy: "  # how measuring()'s refusal starts, which a caller reading a command's output may look for


def _busy_message(text: bytes) -> str:
    try:
        holder = json.loads(text)
        running, stop = str(holder["running"]), str(holder["stop"])
    except (ValueError, KeyError, TypeError):  # caught between its holder's truncate and write
        running, stop = "another probe or calibration", "stop it"
    return (
        f"{BUSY}{running} is measuring this host, and a probe or calibration beside it would time its load; "
        f"wait for it to end, or {stop}"
    )


def write_json_atomic(path: Path, value: Any) -> bool:
    """Write `value` as JSON through a temporary file and a rename, so a reader never sees half a file. False when
    the folder is not writable: a cache that cannot be written only costs the next use its work again."""
    return write_bytes_atomic(path, json.dumps(value).encode())


def write_bytes_atomic(path: Path, data: bytes) -> bool:
    """Replace `path` by `data` through a temporary file and a rename (write_json_atomic); False when it cannot.

    The temporary file's name is unique to this write, not to the process: two server threads writing the same path
    with one shared name wrote into each other's file, and a reader saw the half-written one after the first rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # the umask's mode, as a plain write gives (a shared cache folder stays readable to its other users)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the rename must not reach the disk before the bytes it names (a crash)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False
    return True
