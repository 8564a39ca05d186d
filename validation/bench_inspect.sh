#!/usr/bin/env bash
# Time `vramscope inspect --json` on a big synthetic snapshot against
# Python's pickle.load of the same file, with peak RSS (/usr/bin/time -v).
# Usage: bash validation/bench_inspect.sh [ENTRIES]   (default 1000000)
set -euo pipefail
N=${1:-1000000}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
F=$DIR/big.pickle
cargo build --release -q -p vramscope-snapshot --example gen_snapshot
cargo build --release -q -p vramscope
./target/release/examples/gen_snapshot --entries "$N" --out "$F"
ls -l "$F" | awk '{printf "snapshot: %d trace entries, %.1f MiB\n", '"$N"', $5/1048576}'
measure() {
  local out=$1; shift
  /usr/bin/time -v "$@" >"$DIR/$out" 2>"$DIR/time" || { cat "$DIR/time"; exit 1; }
  awk -F': ' '/Elapsed \(wall clock\)/{w=$2} /Maximum resident/{r=$2} END{printf "wall %s, peak RSS %.0f MiB\n", w, r/1024}' "$DIR/time"
}
printf 'vramscope inspect --json:  '; measure inspect.json ./target/release/vramscope inspect --json "$F"
printf 'python3 pickle.load:       '; measure python.out python3 -c 'import pickle,sys; pickle.load(open(sys.argv[1],"rb"))' "$F"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("peak_allocated_bytes", r["peak_allocated_bytes"], "peak_reserved_bytes", r["peak_reserved_bytes"], "trace_complete", r["trace_complete"])' "$DIR/inspect.json"
