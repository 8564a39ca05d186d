#!/usr/bin/env bash
# Every figure of docs/performance.md's "Current figures", on this machine:
#   bash benches/speed.sh [RUNS] > speed.txt
# The whole-process figures are CPU time (`perf stat`'s task-clock, user + sys of the one
# thread), which a loaded machine inflates far less than wall time; each is the median (and the
# minimum) of RUNS fresh processes. The in-process benches print wall-time medians and minima;
# each runs under `perf stat` too, so that its CPU time next to its elapsed time shows how much of
# the machine it had. Needs perf (linux-tools); no GPU.
set -euo pipefail
runs="${1:-9}"
cd "$(dirname "$0")/.."
export BENCH_RUNS="${BENCH_RUNS:-$runs}"

echo "# commit $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build -q --release -p vramscope
cargo build -q --release -p vramscope-engine --example bench_engine
# the bench executables, run directly below (through `cargo bench` a rebuild would count as CPU)
benches=$(cargo bench -q --no-run -p vramscope-alloc -p vramscope-models -p vramscope-planner \
    --message-format=json 2> /dev/null | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in m["target"]["kind"]:
        print(m["target"]["name"] + "=" + m["executable"])
')
exe() { echo "$benches" | sed -n "s/^$1=//p"; }
bin="${CARGO_TARGET_DIR:-target}/release/vramscope"

# the CPU ms of one process
one() {
    perf stat -x, -e task-clock -o /tmp/speed_perf.$$ "$@" > /dev/null 2>&1 || true
    awk -F, '/task-clock/ {print $1}' /tmp/speed_perf.$$
}
# median and min CPU time of RUNS processes, and the median wall time
whole() {
    local label="$1"; shift
    local cpus=() walls=()
    for _ in $(seq "$runs"); do
        local s e
        s=$(date +%s.%N)
        cpus+=("$(one "$@")")
        e=$(date +%s.%N)
        walls+=("$(python3 -c "print(($e-$s)*1000)")")
    done
    python3 - "$label" "${#cpus[@]}" "${cpus[@]}" "${walls[@]}" <<'PY'
import statistics, sys
label, n = sys.argv[1], int(sys.argv[2])
cpu = sorted(map(float, sys.argv[3:3 + n])); wall = sorted(map(float, sys.argv[3 + n:]))
print(f"{label}: CPU median {statistics.median(cpu):.1f} ms, min {cpu[0]:.1f} ms; "
      f"wall median {statistics.median(wall):.1f} ms ({n} processes)")
PY
}

echo "## whole process (CPU time)"
whole "estimate llama-3.1-70b train fp32 AdamW b1 s4096" \
    "$bin" estimate --model llama-3.1-70b --mode train --batch 1 --seq 4096 --weights fp32 --json
whole "estimate llama-3.1-70b train bf16 AdamW b1 s4096" \
    "$bin" estimate --model llama-3.1-70b --mode train --batch 1 --seq 4096 --weights bf16 --json
whole "estimate llama-3.1-8b train bf16 b4 s2048" \
    "$bin" estimate --model llama-3.1-8b --mode train --batch 4 --seq 2048 --weights bf16 --json
whole "plan llama-3.1-8b train bf16 seq 512 (largest batch, boundary scan)" \
    "$bin" plan --model llama-3.1-8b --mode train --seq 512 --weights bf16 --no-levers --json
# issue #33: FSDP and DDP (every rank group an estimate; the plan's searches)
whole "estimate llama-3.1-70b train bf16 b1 s4096 --fsdp 8 --checkpointing" \
    "$bin" estimate --model llama-3.1-70b --mode train --batch 1 --seq 4096 --weights bf16 \
    --gpu h200 --fsdp 8 --checkpointing --json
whole "plan llama-3.1-70b train bf16 s4096 --fsdp 8 --checkpointing --target-batch 64" \
    "$bin" plan --model llama-3.1-70b --mode train --seq 4096 --weights bf16 --gpu h200 \
    --fsdp 8 --checkpointing --target-batch 64 --json
whole "plan llama-3.1-8b train bf16 s4096 --ddp 8 --checkpointing --target-batch 64" \
    "$bin" plan --model llama-3.1-8b --mode train --seq 4096 --weights bf16 --gpu h200 \
    --ddp 8 --checkpointing --target-batch 64 --json
for mode in train infer; do
    "$bin" plan --model llama-3.1-8b --mode $mode --weights bf16 --batch 1..64 \
        --seq 512,1024,2048,4096 --csv > /tmp/speed_sweep.$$ || true
    cells=$(($(wc -l < /tmp/speed_sweep.$$) - 1))
    whole "plan sweep llama-3.1-8b $mode bf16, batch 1..64 x seq 512..4096 ($cells cells)" \
        "$bin" plan --model llama-3.1-8b --mode $mode --weights bf16 --batch 1..64 \
        --seq 512,1024,2048,4096 --csv
done
rm -f /tmp/speed_sweep.$$ /tmp/speed_perf.$$

# an in-process bench, with its CPU and elapsed time
bench() {
    echo "### $(basename "$1")"
    perf stat -e task-clock -o /tmp/speed_perf.$$ "$@" 2> /dev/null
    awk '/task-clock/ {cpu = $1} /seconds time elapsed/ {wall = $1}
         END {printf "(CPU %.2f s, elapsed %.2f s)\n", cpu / 1000, wall}' /tmp/speed_perf.$$
}
echo "## in process (wall time, median and minimum of BENCH_RUNS=$BENCH_RUNS)"
bench "$(exe alloc)"       # cargo bench -p vramscope-alloc
bench "$(exe estimate)"    # cargo bench -p vramscope-models
bench "$(exe sweep)"       # cargo bench -p vramscope-planner
bench "${CARGO_TARGET_DIR:-target}/release/examples/bench_engine"
rm -f /tmp/speed_perf.$$
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
