#!/usr/bin/env bash
# Issue #36 (session 5), the second call: does the lex made while decoding
# slow `inspect` of a large file? The same binary with the lex (all cores:
# 15 lex threads; 5 cores: 4) and without it (3 cores: below
# LEX_MIN_CORES), against the binary from before the lex, on a 10 M-entry
# synthetic snapshot (1.44 GB); then that file with one byte near its end
# set to 0xff, read by the new binary on all cores and on 5.
#
#   bash ab.sh OUTDIR DIR_WITH_BINARIES ENTRIES
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=$1 BIN=$(cd "$2" && pwd) ENTRIES=${3:-10000000}
M="python3 $here/../snapshot_real/measure.py"
mkdir -p "$OUT"
big=$OUT/big.pickle
$M "gen_snapshot $ENTRIES entries" "$BIN/gen_snapshot" --entries "$ENTRIES" --max-entries "$ENTRIES" \
    --streams 3 --conf expandable_segments:True --out "$big"
echo "{\"label\": \"big bytes\", \"bytes\": $(stat -c %s "$big")}"
for _ in 1 2; do
    $M "big old inspect --json (16 cores)" "$BIN/vramscope-old" inspect --json "$big"
    $M "big new inspect --json (16 cores: lex on 15)" "$BIN/vramscope-new" inspect --json "$big"
    $M "big new inspect --json (3 cores: no lex)" taskset -c 0-2 "$BIN/vramscope-new" inspect --json "$big"
done
$M "big new inspect --json (5 cores: lex on 4)" taskset -c 0-4 "$BIN/vramscope-new" inspect --json "$big"
$M "big old inspect --json (5 cores)" taskset -c 0-4 "$BIN/vramscope-old" inspect --json "$big"
at=$(($(stat -c %s "$big") * 19 / 20))
python3 -c 'import sys; f = open(sys.argv[1], "r+b"); f.seek(int(sys.argv[2])); print("{\"label\": \"corrupted byte\", \"offset\": %s, \"was\": %d}" % (sys.argv[2], f.read(1)[0])); f.seek(int(sys.argv[2])); f.write(b"\xff")' "$big" "$at"
$M "big corrupt new inspect --json (16 cores)" "$BIN/vramscope-new" inspect --json "$big"
$M "big corrupt new inspect --json (5 cores)" taskset -c 0-4 "$BIN/vramscope-new" inspect --json "$big"
$M "big corrupt lex_file (16 cores)" "$BIN/lex_file" "$big"
