"""Record llama.cpp's per-device buffers over several RPC devices: measurements/gpu_logs/llamacpp_rpc_split.json.

No machine here has two GPUs, but llama.cpp's RPC backend makes every rpc-server a GPU-type device, so the layer
split, each device's weights, cache and compute buffer, and pipeline parallelism's copies run through the engine's
own code. The build is llama.cpp from the sdist the engines' venv installs (the same 0c1e57098 tree), with
-DGGML_RPC=ON (10-15 min on 2 cores, so not part of CI; tests/test_llamacpp_split.py reads the record):

    tests/engines/rpc_split.py [--build DIR]   # builds into DIR (default /tmp/kvscope-rpc) when it has no binaries

The models are written straight to GGUF at realistic widths (llamacpp_compute_runner.write_wide: q4_0 zeros).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.engines.test_llamacpp_compute import _GPT_OSS_20B, _LLAMA_8B, _QWEN35_9B, gguf_spec  # noqa: E402

VENV = ROOT / ".venv-engines"
OUT = ROOT / "measurements" / "gpu_logs" / "llamacpp_rpc_split.json"
CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_RPC=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
]  # fmt: skip

# Configs as kvscope reads them (config.json); the runner writes each as a GGUF of the same shapes. Each offloads a
# number of slots (layers and the output layer) prime to the device counts, so no slot sits on a boundary of the
# split, where a few MB of difference in the servers' free memory would move it: 11 slots of Llama, 7 of gpt-oss,
# 9 of Qwen3.5 (Gated DeltaNet and attention layers 3:1, its recurrent state per device; on one and two devices).
MODELS = {
    "llama8b_10l": _LLAMA_8B | {"num_hidden_layers": 10},
    "gptoss20b_6l": _GPT_OSS_20B | {"num_hidden_layers": 6, "layer_types": _GPT_OSS_20B["layer_types"][:6]},
    "qwen35_9b_8l": _QWEN35_9B | {"num_hidden_layers": 8},
}
NO_PIPELINE = ["-ot", "no_such_tensor=CPU"]  # any override turns pipeline parallelism off (llama-context.cpp)


def cases() -> list[dict]:
    out = []
    for model, contexts in (("llama8b_10l", (8192, 32768)), ("gptoss20b_6l", (8192,))):
        for fa in ("on", "off"):  # one device: the GPU's own figure, beside which the split's are read
            args = ["-ngl", "99", "-c", "8192", "-b", "2048", "-ub", "512", "-fa", fa]
            out.append({"id": f"{model} devices=1 ctx=8192 fa={fa}", "model": model, "devices": 1, "args": args})
        for devices in (2, 3):
            for n_ctx in contexts:
                for fa in ("on", "off"):
                    for pipeline in (True, False):
                        args = ["-ngl", "99", "-c", str(n_ctx), "-b", "2048", "-ub", "512", "-fa", fa]
                        args += [] if pipeline else NO_PIPELINE
                        name = f"{model} devices={devices} ctx={n_ctx} fa={fa} {'pipeline' if pipeline else 'one copy'}"
                        out.append({"id": name, "model": model, "devices": devices, "args": args})
    for pipeline in (True, False):
        args = ["-ngl", "99", "-c", "8192", "-b", "2048", "-ub", "512", "-fa", "on"] + ([] if pipeline else NO_PIPELINE)
        name = f"qwen35_9b_8l devices=2 ctx=8192 fa=on {'pipeline' if pipeline else 'one copy'}"
        out.append({"id": name, "model": "qwen35_9b_8l", "devices": 2, "args": args})
    args = ["-ngl", "99", "-c", "8192", "-b", "2048", "-ub", "512", "-fa", "on"]
    out.append({"id": "qwen35_9b_8l devices=1 ctx=8192 fa=on", "model": "qwen35_9b_8l", "devices": 1, "args": args})
    for devices, ngl, fa in ((2, 7, "on"), (1, 7, "on"), (1, 4, "off")):  # -ngl N: the last N - 1 layers and the head
        partial = ["-ngl", str(ngl), "-c", "8192", "-b", "2048", "-ub", "512", "-fa", fa]
        name = f"llama8b_10l devices={devices} ctx=8192 fa={fa} -ngl {ngl}"
        out.append({"id": name, "model": "llama8b_10l", "devices": devices, "args": partial})
    return out


def build(where: Path) -> Path:
    if (where / "build" / "bin" / "ggml-rpc-server").exists():
        return where / "build"
    sdist = next((VENV / "src").glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        prefix = f"{sdist.name.removesuffix('.tar.gz')}/vendor/llama.cpp/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        for m in members:
            m.name = m.name[len(prefix) :]
        tar.extractall(where, members=[m for m in members if m.name], filter="data")
    subprocess.run(["cmake", "-S", str(where), "-B", str(where / "build"), "-G", "Ninja", *CMAKE_FLAGS], check=True)
    subprocess.run(["ninja", "-C", str(where / "build"), "ggml-rpc-server", "llama-completion"], check=True)
    return where / "build"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=Path("/tmp/kvscope-rpc"))
    args = parser.parse_args()
    binaries = build(args.build)
    with tempfile.TemporaryDirectory() as tmp:
        job = {
            "build": str(binaries),
            "tree": str(VENV / "llama.cpp"),
            "out_dir": tmp,
            "wide": {name: gguf_spec(raw) for name, raw in MODELS.items()},
            "cases": cases(),
        }
        (Path(tmp) / "job.json").write_text(json.dumps(job))
        runner = Path(__file__).with_name("llamacpp_rpc_runner.py")
        done = subprocess.run(
            [str(VENV / "bin" / "python"), str(runner), str(Path(tmp) / "job.json")],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    result = json.loads(done.stdout.splitlines()[-1])
    asked = {case["id"]: case for case in job["cases"]}  # the model, device count and flags of each result
    record = {
        "what": "llama.cpp's own per-device buffers with its layer split over RPC devices (one CPU host)",
        "engine": "llama.cpp 0c1e57098 (the tree of llama-cpp-python 0.3.36's sdist), built with "
        + " ".join(CMAKE_FLAGS),
        "how": "tests/engines/rpc_split.py: N ggml-rpc-server processes (CPU backend, -t 1) on local ports; "
        "llama-completion --rpc, every rpc-server reporting the host's free memory (the equal split)",
        "configs": MODELS,
        "models": result["models"],
        "cases": [asked[case["id"]] | case for case in result["cases"]],
    }
    OUT.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: {len(result['cases'])} cases")


if __name__ == "__main__":
    main()
