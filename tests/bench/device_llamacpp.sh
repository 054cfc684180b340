#!/usr/bin/env bash
# One run on a lent GPU machine (tests/bench/device_llamacpp.py says what and why). Needs the llama.cpp sources in
# .device/llama.cpp (carried; see tests/bench/README.md) and writes everything it times under $OUT as it goes, so a
# run cut short still returns what it finished. Every stage has its own time limit, inside the tool's 10 minutes.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=".device/llama.cpp/gguf-py:${PYTHONPATH:-}"
OUT=${OUT:-/tmp/out}; M=/tmp/models; B=/tmp/build; mkdir -p "$OUT" "$M"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
python3 tests/bench/device_llamacpp.py host "$OUT"  # the RAM copy before anything else loads the machine
(timeout 240 python3 tests/bench/device_llamacpp.py gguf "$M" > "$OUT/gguf.log" 2>&1) &
writer=$!
cmake -S .device/llama.cpp -B $B -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 $(cat .device/cmake_flags.txt) \
  > "$OUT/build.log" 2>&1
SECONDS=0
timeout 390 cmake --build $B -j"$(nproc)" --target llama-bench llama-quantize >> "$OUT/build.log" 2>&1
echo "build: rc $? in ${SECONDS}s" | tee -a "$OUT/build.log"
wait $writer; echo "gguf: rc $?" | tee -a "$OUT/build.log"
Q=$B/bin/llama-quantize; LB=$B/bin/llama-bench
timeout 45 $Q "$M/llama2-7b-f16.gguf" "$M/llama2-7b-q4_0.gguf" Q4_0 "$(nproc)" > /dev/null 2>&1
echo "quantize: rc $?" | tee -a "$OUT/build.log"
bench() {  # name, seconds, llama-bench arguments
  local name=$1 limit=$2; shift 2
  timeout "$limit" $LB -o jsonl "$@" > "$OUT/bench-$name.jsonl" 2>> "$OUT/build.log"
  echo "$name: rc $? ($(wc -l < "$OUT/bench-$name.jsonl") rows)" | tee -a "$OUT/build.log"
}
bench h200 60 -m "$M/llama2-7b-q4_0.gguf" -m "$M/llama2-7b-f16.gguf" -ngl 99 -fa 0,1 -p 512 -n 128 -r 3
bench h200-d4096 45 -m "$M/llama2-7b-q4_0.gguf" -m "$M/llama2-7b-f16.gguf" -ngl 99 -fa 1 -d 4096 -p 512 -n 128 -r 3
CUDA_VISIBLE_DEVICES="" bench cpu 60 -m "$M/llama2-7b-q4_0.gguf" -ngl 0 -t "$(nproc)" -p 512 -n 64 -r 2
bench h200-ub2048 30 -m "$M/llama2-7b-q4_0.gguf" -m "$M/llama2-7b-f16.gguf" -ngl 99 -fa 1 -ub 2048 -b 2048 -p 2048 -n 0 -r 3
# one thread to every core's half: checks core.speed.ram's rule (T threads stream at most T × one thread's copy)
CUDA_VISIBLE_DEVICES="" bench cpu-threads 40 -m "$M/llama2-7b-q4_0.gguf" -ngl 0 -t 1,4,8 -p 0 -n 16 -r 2
