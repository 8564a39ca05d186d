#!/bin/bash
# Issue #36, session 17, one call on the GPU machine: a plain-stack
# nanoGPT snapshot of about 3 GB and a wrapped trace of the same run, and
# on them main's `inspect --json`/`--html` (alone), `--range`, `diff`, the
# errors of a corrupt and a truncated copy, then `pickle.load` and
# memory_viz trace_plot (beside each other, cut at END s: a cut tool's line
# has rc 124 and its wall is a lower bound).
#
# `record.py --wrapped-out` writes, from the one dump, the complete trace
# (p3g) and its last KEEP of entries (p3w: what `max_entries` of that many
# would have kept). Training is cut at PSEC s (default: what leaves time
# for the rest before END). D holds vs.xz, read_snapshot.xz, lex_file.xz,
# record.py and corrupt.py; run from the repository root; writes $OUT/log.jsonl,
# $OUT/p3g.inspect.json and $OUT/p3w.inspect.json.
# DRY=stand-in.py: a script taking record.py's arguments that writes the
# two files (to test this one without a GPU).
set -u
D=${D:-xfer/h36}; R=validation/snapshot_real
M="python3 $R/measure.py"; O=${O:-/tmp/b17}; mkdir -p $O
L=$OUT/log.jsonl; END=${END:-420}; KEEP=${KEEP:-0.5}
PSEC=${PSEC:-$(( (END - 125) * 100 / 167 ))}
SECONDS=0
left() { echo $((END - SECONDS)); }
lim() { local t=$((END - 15 - SECONDS)); echo $((t > 5 ? t : 5)); }
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"mem\": \"$(free -g | awk '/Mem/{print $2}') GiB\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"torch\": \"$(python3 -c 'import torch, sys; print(torch.__version__, sys.version.split()[0])')\", \"END\": $END, \"PSEC\": $PSEC, \"KEEP\": $KEEP}" >> $L
REC="python3 $D/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"
( $REC --out $O/p3g.pickle --wrapped-out $O/p3w.pickle --wrapped-keep $KEEP --target-mb 3100 --max-seconds $PSEC > $O/rec.json 2> $O/rec.err ) &
P=$!
for b in vs read_snapshot lex_file; do xz -dc $D/$b.xz > $O/$b && chmod +x $O/$b; done
wait $P
echo "{\"label\": \"recorded\", \"s\": $SECONDS, \"rc\": $?}" >> $L
cat $O/rec.json >> $L; tail -n 3 $O/rec.err
F=$O/p3g.pickle; W=$O/p3w.pickle
[ -s $F ] && [ -s $W ] || { cut -c1-600 $L; exit 1; }
LF=$(stat -c %s $F); LW=$(stat -c %s $W)
echo "{\"label\": \"bytes\", \"p3g\": $LF, \"p3w\": $LW}" >> $L
# one run each first (the report kept; its entry count for the range)
$O/vs inspect --json $F > $OUT/p3g.inspect.json 2> $O/e; tail -c 300 $O/e
$O/vs inspect --json $W > $OUT/p3w.inspect.json 2> $O/e; tail -c 300 $O/e
N=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trace_entries"])' $OUT/p3g.inspect.json)
insp() {  # NAME FILE RUNS: --json and --html alternating
  for r in $(seq $3); do
    [ $(left) -gt 20 ] || break
    $M "$1 --json" $O/vs inspect --json $2
    $M "$1 --html" $O/vs inspect --json --html $O/$1.html $2
  done >> $L
  echo "{\"label\": \"$1 html bytes\", \"bytes\": $(stat -c %s $O/$1.html 2>/dev/null || echo 0)}" >> $L
}
insp p3g $F 2
# a corrupt byte at 90% of the file: a value (a valid pickle), then an opcode
for k in value opcode; do
  [ $(left) -gt 30 ] || break
  python3 $D/corrupt.py $k $F $((LF * 9 / 10)) > $O/c.json && cat $O/c.json >> $L
  for r in 1 2; do
    $M "p3g corrupt $k --json" $O/vs inspect --json $F
    $M "p3g corrupt $k read_snapshot --par" $O/read_snapshot $F --par
  done >> $L
  [ $k = opcode ] && $M "p3g corrupt opcode lex_file" $O/lex_file $F >> $L
  python3 $D/corrupt.py restore $F $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["at"], d["old"])' $O/c.json) >> $L
done
# cut at two thirds (a copy)
head -c $((LF * 2 / 3)) $F > $O/cut.pickle
for r in 1 2 3; do $M "p3g cut at $((LF * 2 / 3)) --json" $O/vs inspect --json $O/cut.pickle; done >> $L
rm -f $O/cut.pickle
insp p3w $W 2
$M "p3g read_snapshot --par" $O/read_snapshot $F --par >> $L
$M "p3g lex_file" $O/lex_file $F >> $L
for r in 1 2; do
  [ $(left) -gt 40 ] || break
  $M "p3g --json --range $((N / 2))..$((N / 2 + 100000))" $O/vs inspect --json --range $((N / 2))..$((N / 2 + 100000)) $F
  $M "diff --json p3g p3w" $O/vs diff --json $F $W
done >> $L
insp p3g $F 1
insp p3w $W 1
echo "{\"label\": \"alone done\", \"s\": $SECONDS}" >> $L
# the Python tools, beside each other
PIDS=""
for n in p3g p3w; do
  ( $M "$n pickle.load" timeout $(lim) python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle > $O/$n.load ) &
  PIDS="$PIDS $!"
  ( $M "$n memory_viz" timeout $(lim) python3 -m torch.cuda._memory_viz trace_plot $O/$n.pickle -o $O/$n.viz.html > $O/$n.viz
    echo "{\"label\": \"$n memory_viz html bytes\", \"bytes\": $(stat -c %s $O/$n.viz.html 2>/dev/null || echo 0), \"s\": $SECONDS}" >> $O/$n.viz
    rm -f $O/$n.viz.html ) &
  PIDS="$PIDS $!"
done
wait $PIDS
cat $O/*.load $O/*.viz >> $L 2>/dev/null
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cut -c1-330 $L
