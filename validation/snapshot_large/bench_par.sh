#!/usr/bin/env bash
# Issue #36, session 8's second pass: the parallel decoder against the
# sequential reader on the GPU machine's CPU, on the three real snapshots
# recorded there first (as bench.sh's RECORD=1).
#
#   bash bench_par.sh OUTDIR DIR
#
# DIR holds vramscope-seq and vramscope-par (one commit, the parallel
# decoder off and on: PAR_MIN_CORES None and Some(8)), read_snapshot (its
# --par: the parallel decoder alone; with no flag: the file reader, off)
# and read_snapshot-old (the previous commit's, for --split). One JSON line
# per measurement (measure.py); `cmp` of the two binaries' --json.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd)
M="python3 $here/../snapshot_real/measure.py"
R="python3 $here/../snapshot_real/record.py"
mkdir -p "$OUT"
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\"}"
CUDA_VISIBLE_DEVICES=0 $R --out "$OUT/c50.pickle" --target-mb 50 >"$OUT/c50.record" 2>&1 &
CUDA_VISIBLE_DEVICES=0 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $R --out "$OUT/w50.pickle" \
    --target-mb 50 --wrap --streams 3 --oom-at 0.7 >"$OUT/w50.record" 2>&1 &
CUDA_VISIBLE_DEVICES=0 $R --out "$OUT/p50.pickle" --target-mb 50 --stacks python >"$OUT/p50.record" 2>&1 &
wait
small="c50 w50 p50"
for n in $small; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s "$OUT/$n.pickle")}"; done
for n in $small; do
    $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' "$OUT/$n.pickle"
done
for n in $small; do
    f=$OUT/$n.pickle
    for _ in 1 2 3; do
        for b in seq par; do
            $M "$n $b inspect --json" "$BIN/vramscope-$b" inspect --json "$f"
            $M "$n $b inspect --html" "$BIN/vramscope-$b" inspect --json --html "$OUT/$b.html" "$f"
        done
        MIMALLOC_PURGE_DELAY=0 $M "$n par inspect --json, MIMALLOC_PURGE_DELAY=0" "$BIN/vramscope-par" inspect --json "$f"
        $M "$n read_snapshot --par" "$BIN/read_snapshot" "$f" --par
        $M "$n read_snapshot (sequential)" "$BIN/read_snapshot" "$f"
        "$BIN/read_snapshot" "$f" --split
        "$BIN/read_snapshot-old" "$f" --split | sed 's/"label": "split/"label": "old split/'
    done
    "$BIN/vramscope-seq" inspect --json "$f" >"$OUT/seq.json"
    "$BIN/vramscope-par" inspect --json "$f" >"$OUT/par.json"
    cmp "$OUT/seq.json" "$OUT/par.json" && echo "{\"label\": \"$n --json same\"}"
done
