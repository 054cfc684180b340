"""Run llama.cpp over several devices on one CPU machine: its RPC backend (run in the engines' venv).

llama.cpp treats each RPC server as a GPU (ggml-rpc.cpp: GGML_BACKEND_DEVICE_TYPE_GPU, with async compute and
events, so pipeline parallelism is on whenever its other conditions hold) and reports the server's free memory,
which for servers on the same host is the same figure: the default layer split is then the equal one kvscope
assumes. Each case starts `devices` rpc-servers (ggml-rpc-server, CPU backend) on local ports and loads the model
with llama-completion --rpc, and reads the buffers the load log prints per device: model, KV, compute.

Reads JSON from the file named by its argument: {"build": path of a llama.cpp build with -DGGML_RPC=ON, "tree":
LLAMACPP_TREE (for gguf-py), "out_dir", "wide": {name: write_wide's spec}, "cases": [{"id", "model", "devices",
"args": [llama-completion flags]}]}. Prints one JSON line: {"models": {name: {tensor: bytes}}, "cases": [{"id",
"buffers": {"model"|"kv"|"rs"|"compute": {device: MiB}}, "pipeline_parallel": bool, "log": [...]}]}.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from llamacpp_compute_runner import write_wide  # this folder: the script's own

BUFFER = re.compile(r"(\S+) (model|KV|RS|compute) buffer size =\s*([\d.]+) MiB")
DEVICE = re.compile(r"RPC\d+\[(127\.0\.0\.1:\d+)\]")  # every RPC device prints as RPC0[host:port]
KEEP = ("buffer size", "pipeline parallelism", "sched copies", "graph splits", "offloaded", "n_ctx ")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise SystemExit(f"rpc-server on port {port} did not start")


def run_case(build: Path, model: str, case: dict) -> dict:
    ports = [free_port() for _ in range(case["devices"])]
    servers = [
        subprocess.Popen(
            [str(build / "bin" / "ggml-rpc-server"), "-H", "127.0.0.1", "-p", str(port), "-t", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        for port in ports:
            wait_for(port)
        endpoints = ",".join(f"127.0.0.1:{port}" for port in ports)
        cmd = [str(build / "bin" / "llama-completion"), "-m", model, "--rpc", endpoints, *case["args"]]
        # -v: the library's info lines; --fit off: no dry run before the load (its buffers are printed too)
        cmd += ["-p", "a", "-n", "1", "--no-warmup", "-no-cnv", "-t", "1", "-v", "--fit", "off"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    finally:
        for server in servers:
            server.kill()
            server.wait()
    log = [line for line in done.stderr.splitlines() if any(k in line for k in KEEP)]
    # the order of --rpc is the device order (GPU 0, 1, ...)
    index = {f"127.0.0.1:{port}": f"GPU{i}" for i, port in enumerate(ports)}

    def named(text: str) -> str:
        return DEVICE.sub(lambda m: index[m.group(1)], text)

    buffers: dict[str, dict[str, float]] = {"model": {}, "kv": {}, "rs": {}, "compute": {}}
    for line in log:
        for device, kind, mib in BUFFER.findall(line):
            part, device = buffers[kind.lower()], named(device)
            part[device] = round(part.get(device, 0.0) + float(mib), 2)  # a model's two caches (SWA, full) add up
    if not buffers["compute"]:
        raise SystemExit(f"{case['id']}: no compute buffer in the log:\n{done.stderr[-4000:]}")
    return {
        "id": case["id"],
        "buffers": buffers,
        "pipeline_parallel": any("pipeline parallelism enabled" in line for line in log),
        "command": " ".join(Path(c).name if i in (0, 2) else c for i, c in enumerate(cmd)).replace(endpoints, "…"),
        "log": [named(line) for line in log],
    }


def tensor_bytes(path: Path) -> dict[str, int]:
    import gguf

    return {t.name: int(t.n_bytes) for t in gguf.GGUFReader(str(path)).tensors}


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    sys.path[:0] = [str(Path(job["tree"]) / "gguf-py")]  # the same gguf-py the converter uses
    build, out_dir = Path(job["build"]), Path(job["out_dir"])
    models, results = {}, []
    for name, cfg in job["wide"].items():
        path = Path(write_wide(name, cfg, out_dir))
        try:
            models[name] = tensor_bytes(path)
            results += [run_case(build, str(path), case) for case in job["cases"] if case["model"] == name]
        finally:
            path.unlink()
    print(json.dumps({"models": models, "cases": results}))


if __name__ == "__main__":
    main()
