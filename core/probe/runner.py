"""Runs one probe in a child process: one at a time per machine, with a timeout, cancel and streamed progress.

The parent never imports torch: the app (or the CLI) stays small and a probe's GPU memory goes when its process
does. The child runs in its own process group, so a timeout or cancel kills it and anything it started (vLLM's
engine core) in one signal.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from core.errors import InputError
from core.probe.request import ContextResult, ProbeRequest, ProbeResult
from core.probe.results import RESULTS_NAME, SCHEMA_VERSION, append_result, results_dir

ROOT = Path(__file__).resolve().parents[2]
LOCK_NAME = "probe.lock"
KILL_GRACE_S = 3.0  # SIGTERM first (lets CUDA tear down), SIGKILL after this

Progress = Callable[[dict[str, Any]], None]
Cancel = threading.Event | Callable[[], bool]


class ProbeBusy(InputError):
    """Another probe holds this machine's lock."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    model: str
    started: str


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def read_holder(lock_path: Path) -> Holder | None:
    try:
        data = json.loads(lock_path.read_text())
        return Holder(int(data["pid"]), str(data["host"]), str(data["model"]), str(data["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextmanager
def probe_lock(directory: Path, model: str) -> Iterator[int]:
    """The machine's probe lock: an flock, which the kernel drops when its holder dies, so a dead pid never
    blocks; the JSON inside only names the holder for the "busy" message. Yields the fd (the child inherits it)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = read_holder(path)
        who = (
            f"a probe of {holder.model} (pid {holder.pid} on {holder.host}) since {holder.started}"
            if holder
            else "another probe"
        )
        raise ProbeBusy(f"busy: {who}; wait for it to finish or cancel it") from None
    try:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "model": model, "started": _now()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        yield fd
    finally:
        os.ftruncate(fd, 0)
        os.close(fd)


def _cancelled(cancel: Cancel | None) -> bool:
    if cancel is None:
        return False
    return cancel.is_set() if isinstance(cancel, threading.Event) else bool(cancel())


def _kill_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # The leader is gone; stragglers in its group (vLLM workers) get SIGKILL too.
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def _reader(stream: Any, queue: Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            msg = {"event": "log", "message": line}
        queue.put(msg if isinstance(msg, dict) else {"event": "log", "message": line})
    queue.put(None)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def record_of(result: ProbeResult) -> dict[str, Any]:
    """The results-file line for a finished probe."""
    req = result.request
    return {
        "schema_version": SCHEMA_VERSION,
        "time": _now(),
        "status": result.status,
        "host": result.env.get("host") or socket.gethostname(),
        "gpu": result.env.get("gpu"),
        "gpu_memory_bytes": result.env.get("gpu_memory_bytes"),
        "driver": result.env.get("driver"),
        "versions": {k: result.env.get(k) for k in ("torch", "transformers", "vllm", "flash_linear_attention")},
        "model": result.model or req.model,
        "settings": req.to_dict() | {"device_used": result.device, "weights": result.weights, "scale": result.scale},
        "weights_bytes": result.weights_bytes,
        "predicted": [
            {
                "context": c.context,
                "cache_bytes": c.predicted_cache_bytes,
                "max_concurrency": c.predicted_max_concurrency,
            }
            for c in result.contexts
        ],
        "measured": [
            {k: v for k, v in c.to_dict().items() if k not in ("predicted_cache_bytes", "predicted_max_concurrency")}
            for c in result.contexts
        ],
        "decode_mode": result.decode_mode,
        "notes": list(result.notes),
        "error": result.error,
        "elapsed_s": round(result.elapsed_s, 3),
    }


def run_probe(
    request: ProbeRequest,
    on_progress: Progress | None = None,
    cancel: Cancel | None = None,
    timeout: float | None = 600.0,
    *,
    directory: str | os.PathLike[str] | None = None,
    record: bool = True,
) -> ProbeResult:
    """Run `request` in a child process and return what it measured.

    on_progress gets every message the child sends ({"event": "progress", "message": ...}, {"event": "context",
    "row": ...}, ...). `cancel` (an Event or a callable) stops it; `timeout` (seconds, None = none) kills it. The
    result's status says which ("ok", "timeout", "cancelled", "error"); a busy machine raises ProbeBusy. With
    `record`, the run is appended to <directory>/probes.jsonl (directory: $KVSCOPE_PROBE_DIR or
    measurements/results).
    """
    folder = results_dir(directory)
    notify = on_progress or (lambda _msg: None)
    with probe_lock(folder, request.model) as lock_fd:
        result = _run_child(request, notify, cancel, timeout, lock_fd)
        if record:
            path = folder / RESULTS_NAME
            append_result(path, record_of(result))
            result = ProbeResult(**{**result.__dict__, "results_path": str(path)})
    return result


def _run_child(
    request: ProbeRequest, notify: Progress, cancel: Cancel | None, timeout: float | None, lock_fd: int
) -> ProbeResult:
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.NamedTemporaryFile(prefix="kvscope-probe-", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
    rows: list[ContextResult] = []
    info: dict[str, Any] = {}
    status, error = "error", None
    try:
        with open(log_path, "w") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "core.probe.worker"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                start_new_session=True,  # its own process group: one killpg ends it and its children
                pass_fds=(lock_fd,),  # the child holds the lock too, so a dead parent cannot free a busy GPU
            )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request.to_dict()))
        proc.stdin.close()
        queue: Queue[dict[str, Any] | None] = Queue()
        reader = threading.Thread(target=_reader, args=(proc.stdout, queue), daemon=True)
        reader.start()
        finished = False
        try:
            while not finished:
                if deadline is not None and time.monotonic() > deadline:
                    status, error = "timeout", f"timed out after {timeout:g} s; the probe process was killed"
                    break
                if _cancelled(cancel):
                    status, error = "cancelled", "cancelled; the probe process was killed"
                    break
                try:
                    msg = queue.get(timeout=0.1)
                except Empty:
                    continue
                if msg is None:
                    finished = True
                    break
                event = msg.get("event")
                if event == "context":
                    rows.append(ContextResult.from_dict(msg["row"]))
                elif event in ("setup", "weights", "done"):
                    info.update({k: v for k, v in msg.items() if k != "event"})
                    if event == "done":
                        status = "ok"
                elif event == "error":
                    error = msg.get("message")
                notify(msg)
        finally:
            _kill_group(proc)
            proc.wait()
            reader.join(timeout=5)
        if finished and status != "ok" and error is None:
            error = f"the probe process died (exit status {proc.returncode}) without a result"
        if status in ("timeout", "cancelled"):
            notify({"event": status, "message": error})
    finally:
        tail = _tail(log_path)
        log_path.unlink(missing_ok=True)
    modes = sorted({r.decode_mode for r in rows})
    return ProbeResult(
        status=status,
        request=request,
        contexts=tuple(rows),
        model=info.get("model", ""),
        device=info.get("device", ""),
        weights=info.get("weights", ""),
        scale=info.get("scale", ""),
        decode_mode="/".join(modes),
        weights_bytes=info.get("weights_bytes"),
        notes=tuple(info.get("notes", ())),
        env=info.get("env", {}),
        error=error,
        elapsed_s=time.monotonic() - started,
        log_tail=tail if status != "ok" else "",
    )
