#!/usr/bin/env bash
# Issue #3's speed and memory acceptance, measured side by side on the SAME
# synthetic snapshot (>= 500 MB by default):
#   vramscope inspect --json FILE    must be >= 10x faster than
#   python3 -c 'import pickle; pickle.load(open(FILE, "rb"))'
# and its peak RSS must stay within 1.5x the file's size.
#
# Usage: bash validation/bench_inspect.sh [ENTRIES] [REPS]
#   ENTRIES  trace entries of the snapshot (default 3500000: about 515 MB
#            with stacks, 260 MB without)
#   REPS     runs of each command (default 3); they alternate, and the
#            medians are compared
# Environment: FRAMES=0 writes no stacks; KEEP=FILE keeps the snapshot there
# (and reuses it when it exists); SEED=S picks another run; ORDER=alternate
# runs the two commands in turn (default: the file is read once to warm the
# page cache, then all vramscope runs, then all Python runs).
#
# Note: the vramscope binary uses mimalloc, which backs its memory with
# transparent huge pages; right after a process that freed gigabytes (a
# Python run, in ORDER=alternate) the kernel compacts memory for them and a
# run can take ~0.4 s more. MIMALLOC_ALLOW_THP=0 (or mimalloc's `no_thp`
# feature) avoids that.
#
# Times are wall-clock seconds (and user+sys CPU seconds) from
# /usr/bin/time -v; peak RSS is its "Maximum resident set size". The
# generator prints the allocator twin's memory_stats() peaks, which the
# inspect JSON must equal.
set -euo pipefail
N=${1:-3500000}
REPS=${2:-3}
SEED=${SEED:-1}
cd "$(dirname "$0")/.."
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
F=${KEEP:-$DIR/big.pickle}
cargo build --release -q -p vramscope-snapshot --example gen_snapshot
cargo build --release -q -p vramscope
GEN_ARGS=(--entries "$N" --seed "$SEED" --out "$F")
[ "${FRAMES:-1}" = 0 ] && GEN_ARGS+=(--no-frames)
if [ ! -s "$F" ]; then
  ./target/release/examples/gen_snapshot "${GEN_ARGS[@]}" 2>"$DIR/gen.txt"
  cat "$DIR/gen.txt"
fi
SIZE=$(stat -c %s "$F")
python3 - "$SIZE" "$N" <<'PY'
import sys
size, n = int(sys.argv[1]), int(sys.argv[2])
print(f"snapshot: {size} bytes ({size / 1e6:.1f} MB, {size / 2**20:.1f} MiB), about {n} trace entries")
if size < 500e6:
    print("WARNING: the file is smaller than 500 MB; the acceptance asks for >= 500 MB")
PY
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"

# measure NAME CMD...: one run, appending "wall cpu rss_kib" to $DIR/NAME.
measure() {
  local name=$1; shift
  /usr/bin/time -v "$@" >"$DIR/$name.out" 2>"$DIR/time" || { cat "$DIR/time"; exit 1; }
  awk -F': ' '
    /Elapsed \(wall clock\)/ { n = split($2, p, ":"); w = 0; for (i = 1; i <= n; i++) w = w * 60 + p[i] }
    /User time/ { u = $2 } /System time/ { s = $2 } /Maximum resident/ { r = $2 }
    END { printf "%.2f %.2f %d\n", w, u + s, r }' "$DIR/time" >>"$DIR/$name"
  printf '  %-10s %s\n' "$name" "$(tail -1 "$DIR/$name" | awk '{printf "wall %6.2f s  cpu %6.2f s  peak RSS %5.0f MiB", $1, $2, $3 / 1024}')"
}
V=(./target/release/vramscope inspect --json "$F")
P=(python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$F")
cat "$F" >/dev/null
if [ "${ORDER:-blocks}" = alternate ]; then
  for r in $(seq "$REPS"); do
    echo "run $r/$REPS:"
    measure vramscope "${V[@]}"
    measure python "${P[@]}"
  done
else
  echo "$REPS runs of each, vramscope first:"
  for r in $(seq "$REPS"); do measure vramscope "${V[@]}"; done
  for r in $(seq "$REPS"); do measure python "${P[@]}"; done
fi

python3 - "$DIR" "$SIZE" <<'PY'
import json, statistics, sys
d, size = sys.argv[1], int(sys.argv[2])
def rows(name):
    return [tuple(map(float, l.split())) for l in open(f"{d}/{name}") if l.strip()]
v, p = rows("vramscope"), rows("python")
med = lambda xs: statistics.median(xs)
vw, pw = med([r[0] for r in v]), med([r[0] for r in p])
vc, pc = med([r[1] for r in v]), med([r[1] for r in p])
vr, pr = max(r[2] for r in v) * 1024, max(r[2] for r in p) * 1024
print(f"file size                  {size / 2**20:9.1f} MiB")
print(f"python3 pickle.load        wall {pw:7.2f} s  cpu {pc:7.2f} s  peak RSS {pr / 2**20:7.1f} MiB ({pr / size:.2f}x the file)")
print(f"vramscope inspect --json   wall {vw:7.2f} s  cpu {vc:7.2f} s  peak RSS {vr / 2**20:7.1f} MiB ({vr / size:.2f}x the file)")
print(f"speed-up (medians)         wall {pw / vw:6.1f}x    cpu {pc / vc:6.1f}x   (needs >= 10x)")
ok = pw / vw >= 10 and vr <= 1.5 * size
print("acceptance:", "PASS" if ok else "FAIL", f"(RSS {vr / size:.2f}x <= 1.5x, speed-up {pw / vw:.1f}x >= 10x)")
r = json.load(open(f"{d}/vramscope.out"))
print("inspect: peak_allocated_bytes", r["peak_allocated_bytes"], "peak_active_bytes", r["peak_active_bytes"],
      "peak_reserved_bytes", r["peak_reserved_bytes"], "trace_complete", r["trace_complete"])
PY
