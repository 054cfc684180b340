"""Runs one probe in a child process: one at a time per host, never beside a calibration (core.files.measuring),
with a timeout, cancel and streamed progress.

The parent never imports torch: the app (or the CLI) stays small and a probe's GPU memory goes when its process
does. The child runs in its own process group, so a timeout or cancel kills it and anything it started (vLLM's
engine core) in one signal.
"""

from __future__ import annotations

import importlib.util
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
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty, Queue
from typing import Any

from core.errors import InputError
from core.files import engines_venv_python, measuring, open_lock, say_measuring
from core.probe.request import ContextResult, ProbeRequest, ProbeResult
from core.probe.results import RESULTS_NAME, SCHEMA_VERSION, append_result, lock_path, results_dir
from core.speed import calibrate_job

ROOT = Path(__file__).resolve().parents[2]
KILL_GRACE_S = 3.0  # SIGTERM first (lets CUDA tear down), SIGKILL after this

Progress = Callable[[dict[str, Any]], None]
Cancel = threading.Event | Callable[[], bool]


class ProbeBusy(InputError):
    """Another probe, or a calibration, is measuring this host."""


@dataclass(frozen=True)
class Holder:
    pid: int  # the process that took the lock (the app's server, the CLI)
    host: str
    model: str
    started: str
    probe_pid: int | None = None  # the probe's own process, once started: what `kill` or Cancel would end

    def describe(self) -> str:
        who = f"probe process pid {self.probe_pid}, " if self.probe_pid else ""
        return f"a probe of {self.model} ({who}started by pid {self.pid} on {self.host}) since {self.started}"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _parse_holder(text: bytes) -> Holder | None:
    try:
        data = json.loads(text)
        probe_pid = data.get("probe_pid")
        return Holder(
            int(data["pid"]),
            str(data["host"]),
            str(data["model"]),
            str(data["started"]),
            int(probe_pid) if probe_pid else None,
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


@contextmanager
def probe_lock(directory: Path, model: str) -> Iterator[int]:
    """This host's measuring lock (core.files.measuring), held for a probe of `model` whose results go to
    `directory`, which is checked writable first: said before any work. Yields the fd (the child inherits it)."""
    os.close(open_lock(lock_path(directory / RESULTS_NAME), "probes save their results", "KVSCOPE_PROBE_DIR", 0o644))
    with measuring(_holder_record(Holder(os.getpid(), socket.gethostname(), model, _now())), ProbeBusy) as fd:
        yield fd


def _holder_record(holder: Holder) -> dict[str, Any]:
    """What the lock says of a probe: its Holder, and what the refusal of the next run says."""
    # the probe's own process, once it has one: its starter may be the app's server
    stop = f"stop it (Cancel on Measure live, or kill {holder.probe_pid})" if holder.probe_pid else "stop it"
    return asdict(holder) | {"running": holder.describe(), "stop": stop}


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


def kvscope_revision() -> str | None:
    """The commit of this checkout ("+ changes to core/" when its sizing code differs from it); None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10)  # fmt: skip
        if head.returncode != 0:
            return None
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "core"], cwd=ROOT,
                                 capture_output=True, text=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + (" + changes to core/" if changed else "")


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
        "versions": {k: result.env.get(k) for k in ("torch", "transformers", "vllm", "flash_linear_attention")}
        | {"kvscope": kvscope_revision()},  # the prediction's own code: its formulas change between commits
        "model": result.model or req.name or req.model,
        "settings": req.to_dict()
        | {"device_used": result.device, "dtype_used": result.dtype, "weights": result.weights, "scale": result.scale}
        | ({"vllm_args": result.vllm_args} if result.vllm_args else {}),
        "weights_bytes": result.weights_bytes,
        "predicted": [
            {
                "context": c.context,
                "cache_bytes": c.predicted_cache_bytes,
                "max_concurrency": c.predicted_max_concurrency,
                "kv_capacity_tokens": c.predicted_kv_capacity_tokens,
                "prefill_tok_s": c.predicted_prefill_tok_s,
                "decode_tok_s": c.predicted_decode_tok_s,
                "speed_basis": c.speed_basis or None,
            }
            for c in result.contexts
        ],
        "measured": [{k: v for k, v in c.to_dict().items() if not k.startswith("predicted_")} for c in result.contexts],
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
    "row": ...}, ...) and {"event": "started", "pid": ...} when the child starts. `cancel` (an Event or a callable,
    polled every 0.1 s) stops it; `timeout` (seconds, None = none) kills it. The result's status says which ("ok",
    "timeout", "cancelled", "error"); a busy machine raises ProbeBusy. With `record`, the run is appended to
    <directory>/probes.jsonl (directory: $KVSCOPE_PROBE_DIR or measurements/results).
    """
    folder = results_dir(directory)
    with probe_lock(folder, request.name or request.model) as lock_fd:
        return _run_locked(request, folder, lock_fd, on_progress or (lambda _msg: None), cancel, timeout, record)


def _run_locked(
    request: ProbeRequest,
    folder: Path,
    lock_fd: int,
    notify: Progress,
    cancel: Cancel | None,
    timeout: float | None,
    record: bool,
) -> ProbeResult:
    result = _run_child(request, notify, cancel, timeout, lock_fd)
    if record:
        path = folder / RESULTS_NAME
        try:
            append_result(path, record_of(result))
        except OSError as err:  # a full disk: what was measured is still shown; the file keeps its earlier runs
            note = f"not saved to {RESULTS_NAME} ({err.strerror or err}); earlier runs there are unchanged"
            return replace(result, notes=(*result.notes, note))
        result = replace(result, results_path=str(path))
    return result


class ProbeJob:
    """A probe running on a background thread of this process: what a web page starts, polls and cancels.

    A page's script must not block on a probe: Streamlit only stops a script at its next `st.` call, so a Cancel
    click (a rerun) would wait for the probe's next message, and the page drew nothing else meanwhile. The lock is
    taken in the constructor, so a busy machine raises ProbeBusy there, in the caller's thread.
    """

    def __init__(
        self,
        request: ProbeRequest,
        timeout: float | None = 600.0,
        *,
        directory: str | os.PathLike[str] | None = None,
        record: bool = True,
    ) -> None:
        self.request = request
        self.started = time.time()
        self.messages: list[dict[str, Any]] = []  # appended by the worker thread; a list append is atomic
        self.result: ProbeResult | None = None
        self.pid: int | None = None  # the probe process, once started
        self._cancel = threading.Event()
        folder = results_dir(directory)
        global _ACTIVE
        with calibrate_job.GUARD:
            # a calibration of this server first, before the host's lock is opened: a lock taken and given back
            # here stayed held while the calibration's thread forked its process (a fork holds every open file
            # until the child closes them), and the next probe read it as a probe still measuring
            calibrating = calibrate_job.active_calibration()
            if calibrating is not None:
                raise ProbeBusy(
                    f"busy: a calibration of this machine started {time.time() - calibrating.started:.0f} s ago is "
                    "running on this server; probe once it has ended (the two would slow each other's timings)"
                )
            self._lock = probe_lock(folder, request.name or request.model)
            lock_fd = self._lock.__enter__()
            self._thread = threading.Thread(
                target=self._run, args=(folder, lock_fd, timeout, record), name="kvscope-probe", daemon=True
            )
            _ACTIVE = self
            self._thread.start()

    def _note(self, msg: dict[str, Any]) -> None:
        if msg.get("event") == "started":
            self.pid = msg.get("pid")
        self.messages.append(msg)

    def _run(self, folder: Path, lock_fd: int, timeout: float | None, record: bool) -> None:
        try:
            self.result = _run_locked(self.request, folder, lock_fd, self._note, self._cancel, timeout, record)
        except Exception as err:  # the page must always get a result to show, never a thread that died silently
            self.result = ProbeResult(status="error", request=self.request, error=f"{type(err).__name__}: {err}")
        finally:
            self._lock.__exit__(None, None, None)

    @property
    def running(self) -> bool:
        """True until the probe process is gone, its result recorded and the lock released."""
        return self._thread.is_alive()

    def cancel(self) -> None:
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> ProbeResult | None:
        self._thread.join(timeout)
        return None if self.running else self.result


_ACTIVE: ProbeJob | None = None


def active_job() -> ProbeJob | None:
    """The probe this process is running now (started by any session of the app), if any."""
    job = _ACTIVE
    return job if job is not None and job.running else None


def worker_command(request: ProbeRequest) -> list[str]:
    """The probe process's command: this Python, or for vLLM where this one has none, the engines' virtualenv
    (`make engines`: vLLM's CPU build), which runs core/ from this checkout too."""
    python = sys.executable
    if request.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        engines = engines_venv_python()
        python = str(engines) if engines.exists() else python
    return [python, "-m", "core.probe.worker"]


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
                worker_command(request),
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
                start_new_session=True,  # its own process group: one killpg ends it and its children
                pass_fds=(lock_fd,),  # the child holds the lock too, so a dead parent cannot free a busy host
            )
        assert proc.stdin is not None and proc.stdout is not None
        holder = _parse_holder(os.pread(lock_fd, 1 << 16, 0))
        if holder is not None:
            say_measuring(lock_fd, _holder_record(replace(holder, probe_pid=proc.pid)))
        notify({"event": "started", "pid": proc.pid})
        # The worker sizes a CPU probe to the time it has (full size when that fits).
        proc.stdin.write(json.dumps(request.to_dict() | {"time_budget_s": timeout}))
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
        dtype=info.get("dtype", ""),
        weights_bytes=info.get("weights_bytes"),
        notes=tuple(info.get("notes", ())),
        env=info.get("env", {}),
        error=error,
        elapsed_s=time.monotonic() - started,
        log_tail=tail if status != "ok" else "",
        vllm_args=info.get("vllm_args", {}),
    )
