#!/usr/bin/env bash
# `vramscope inspect` against Python's own tools on synthetic snapshots shaped
# like real ones (issue #36): for each file, `pickle.load` alone,
# `python -m torch.cuda._memory_viz trace_plot`, `vramscope inspect --json`
# and `vramscope inspect --html`, side by side: wall seconds and peak RSS
# (/usr/bin/time -f %M). Prints one markdown table (docs/inspect-speed.md).
#
# Usage: bash benches/inspect_speed.sh [SIZES] [REPS]
#   SIZES  which files (default "50 500"): about 50 MB and 500 MB
#   REPS   runs of each vramscope command (default 3; the median is shown);
#          the Python tools run once (they take minutes at 500 MB)
# Environment: PY (default /work/main/.venv/bin/python, torch installed);
#   DIR keeps the generated files there (and reuses them); SKIP_VIZ=1 skips
#   memory_viz; BIN (default target/release/vramscope).
#
# Files, per size (gen_snapshot, crates/snapshot/examples):
#   complete  one stream, every entry of the run kept
#   wrapped   _record_memory_history(max_entries=N) reached: the run made
#             twice N entries and the trace starts in the middle of it;
#             3 streams (a prefetch stream and a DDP-like bucket stream) and
#             expandable segments
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=${1:-"50 500"}
REPS=${2:-3}
PY=${PY:-/work/main/.venv/bin/python}
BIN=${BIN:-target/release/vramscope}
DIR=${DIR:-$(mktemp -d)}
mkdir -p "$DIR"
[ "${BIN}" = target/release/vramscope ] && cargo build --release -q -p vramscope
cargo build --release -q -p vramscope-snapshot --example gen_snapshot
GEN=target/release/examples/gen_snapshot

# entries for SIZE MB: about 145 bytes an entry with stacks
entries() { echo $(($1 * 1000000 / 145)); }

# measure CMD...: one run; prints "wall_s rss_kib"
measure() {
    /usr/bin/time -f "%e %M" -o "$DIR/time" "$@" >/dev/null 2>"$DIR/err" || {
        cat "$DIR/err" >&2
        echo "FAILED: $*" >&2
        echo "nan nan"
        return
    }
    cat "$DIR/time"
}

# median of REPS runs of CMD...: "wall_s rss_kib" (max RSS)
median() {
    for _ in $(seq "$REPS"); do measure "$@"; done | sort -n |
        awk '{w[NR] = $1; if ($2 > r) r = $2} END {print w[int((NR + 1) / 2)], r}'
}

echo "machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| file | size | entries | pickle.load | memory_viz trace_plot | inspect --json | inspect --html | json vs pickle.load | json vs memory_viz |"
echo "|---|---|---|---|---|---|---|---|---|"
for mb in $SIZES; do
    n=$(entries "$mb")
    for kind in complete wrapped; do
        f="$DIR/$kind-$mb.pickle"
        if [ ! -s "$f" ]; then
            case $kind in
                complete) "$GEN" --entries "$n" --out "$f" 2>/dev/null ;;
                wrapped) "$GEN" --entries $((2 * n)) --max-entries "$n" --streams 3 \
                    --conf expandable_segments:True --out "$f" 2>/dev/null ;;
            esac
        fi
        size=$(stat -c %s "$f")
        cat "$f" >/dev/null # warm the page cache
        read -r pw pr < <(measure "$PY" -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$f")
        if [ "${SKIP_VIZ:-0}" = 1 ]; then
            vw=nan vr=nan
        else
            read -r vw vr < <(measure "$PY" -m torch.cuda._memory_viz trace_plot "$f" -o "$DIR/viz.html")
            rm -f "$DIR/viz.html"
        fi
        read -r jw jr < <(median "$BIN" inspect --json "$f")
        read -r hw hr < <(median "$BIN" inspect --json --html "$DIR/report.html" "$f")
        rm -f "$DIR/report.html"
        ent=$("$BIN" inspect --json "$f" | "$PY" -c 'import json, sys; r = json.load(sys.stdin); print(r.get("trace_entries", "?"))')
        "$PY" - "$kind" "$size" "$ent" "$pw" "$pr" "$vw" "$vr" "$jw" "$jr" "$hw" "$hr" <<'PY'
import math, sys
kind, size, ent = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pw, pr, vw, vr, jw, jr, hw, hr = map(float, sys.argv[4:])
def cell(w, r):
    if math.isnan(w):
        return "–"
    rss = r * 1024
    unit = f"{rss / 2**30:.2f} GiB" if rss >= 2**30 else f"{rss / 2**20:.0f} MiB"
    return f"{w:.2f} s, {unit} ({rss / size:.2f}× file)"
ratio = lambda a, b: "–" if math.isnan(a) or math.isnan(b) or b == 0 else f"{a / b:.1f}×"
print(f"| {kind} | {size / 1e6:.0f} MB | {ent} | {cell(pw, pr)} | {cell(vw, vr)} | {cell(jw, jr)} | {cell(hw, hr)} | {ratio(pw, jw)} | {ratio(vw, jw)} |")
PY
    done
done
