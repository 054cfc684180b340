"""One long-lived child process that resolves configs with transformers for the app.

transformers imports torch (1.5–3 s of CPU). A child process per new config paid that on every upload or Hub id the
server had not seen, so one link could cost several seconds of server CPU. This child imports it once and then
answers each config in milliseconds; torch stays out of the server process. Requests and answers are JSON lines on
its stdin/stdout; one request at a time (a lock), each under a time limit past which the child is killed and the
next request starts a fresh one.

Run as `python -m core.model.resolver` (the child side).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from core.errors import InputError

START_DELAY_S = 5.0  # after the server's first page: long enough for it to render first
NICENESS = 10


class Resolver:
    """The parent's handle on the child; `resolve` is thread-safe (Streamlit serves sessions from threads)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def _child(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "core.model.resolver"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # transformers' warnings; an unread pipe would fill and block it
                cwd=Path(__file__).resolve().parents[2],
                preexec_fn=lambda: os.nice(NICENESS),  # its import must not slow the pages being served
            )
        return self._proc

    def start(self) -> None:
        """Start the child now (it imports transformers at once), so that the first config a visitor sends does
        not wait for that."""
        with self._lock:
            self._child()

    def start_soon(self, delay_s: float = START_DELAY_S) -> None:
        """`start` after `delay_s`, once per process: the app calls this as its first page loads, so the import
        does not compete with that page's first render (on two cores it slowed it by about 0.5 s of CPU)."""
        with self._lock:
            if self._timer is None and self._proc is None:
                self._timer = threading.Timer(delay_s, self.start)
                self._timer.daemon = True
                self._timer.start()

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None

    def resolve(self, raw: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            proc = self._child()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(raw).encode() + b"\n")
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], timeout)
                line = proc.stdout.readline() if ready else b""
            except OSError:  # the child died under us (killed, out of memory)
                line = b""
            if not line:
                self.stop()
                raise InputError(
                    f"resolving this config took more than {timeout:g} s or failed; try again, or give a smaller one"
                )
        answer = json.loads(line)
        if "error" in answer:
            raise InputError(answer["error"])
        return answer["config"]

    def cpu_seconds(self) -> float:
        """User + system CPU the child has used so far (Linux /proc): a benchmark adds it to the server's own."""
        pid = self.pid
        if pid is None:
            return 0.0
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


RESOLVER = Resolver()


def _serve() -> None:
    """The child: one JSON config per line in, one {"config": …} or {"error": …} line out."""
    import transformers  # noqa: F401  (at start, not on the first request: what the child is for)

    from core.model.config import resolve

    out = os.fdopen(os.dup(1), "w")  # the answers' channel; anything a library prints goes to stderr instead
    os.dup2(2, 1)
    for line in sys.stdin:
        try:
            answer = {"config": resolve(json.loads(line))}
        except InputError as err:
            answer = {"error": str(err)}
        except Exception as err:  # a config transformers chokes on must not end the child for everyone
            answer = {"error": f"config resolution failed ({type(err).__name__}: {' '.join(str(err).split())})"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve()
