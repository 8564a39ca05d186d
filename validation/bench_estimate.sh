#!/bin/bash
# Whole-process time of one estimate (issue #5: a Llama-3.1-70B-sized training
# step, 80 layers, batch 1, seq 4096, in at most 50 ms on one core), and of a
# 7B-class plan sweep (issue #6: at least 1,000 estimates per second).
#   bash validation/bench_estimate.sh [RUNS]
set -eu
runs="${1:-20}"
cd "$(dirname "$0")/.."
cargo build -q --release -p vramscope
bin="${CARGO_TARGET_DIR:-target}/release/vramscope"
ms() { python3 -c "import sys;print(f'{float(sys.argv[1])*1000:.1f}')" "$1"; }
time_it() {
  local label="$1"; shift
  local best=999 all=()
  for _ in $(seq "$runs"); do
    local s e
    s=$(date +%s.%N); taskset -c 0 "$@" > /dev/null || true; e=$(date +%s.%N)
    all+=("$(python3 -c "print($e-$s)")")
  done
  python3 - "$label" "${all[@]}" <<'PY'
import sys, statistics
label, xs = sys.argv[1], sorted(map(float, sys.argv[2:]))
print(f"{label}: median {statistics.median(xs)*1000:.1f} ms, min {xs[0]*1000:.1f} ms over {len(xs)} runs")
PY
}
time_it "estimate llama-3.1-70b train fp32 b1 s4096 (whole process)" \
  $bin estimate --model llama-3.1-70b --mode train --batch 1 --seq 4096 --json
time_it "estimate llama-3.1-70b train bf16 b1 s4096 (whole process)" \
  $bin estimate --model llama-3.1-70b --mode train --batch 1 --seq 4096 --weights bf16 --json
sweep() {
  local label="$1"; shift
  local s e n
  s=$(date +%s.%N)
  taskset -c 0 $bin plan --model llama-3.1-8b "$@" --batch 1..64 --seq 512,1024,2048,4096 --csv > /tmp/sweep.csv || true
  e=$(date +%s.%N)
  n=$(($(wc -l < /tmp/sweep.csv) - 1))
  runs=$(grep -c ',true$' /tmp/sweep.csv || true)
  python3 -c "t=$e-$s; print(f'sweep llama-3.1-8b $label, {$n} cells (the model ran at {$runs}): {t:.2f} s, {$n/t:.0f} estimates/s')"
}
sweep "train bf16" --mode train --weights bf16
sweep "infer bf16" --mode infer --weights bf16
