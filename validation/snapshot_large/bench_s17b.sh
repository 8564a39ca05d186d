#!/bin/bash
# Issue #36, after session 17's call: the errors of a damaged multi-GB file
# with 9fe5c67's binary (vs.xz, "old") against one with the parallel
# path's changes (vs-new.xz, "new"), on the GPU machine. gen_snapshot makes
# a synthetic file of N entries there (20 M: 2.87 GB); corrupt.py changes a
# value (a valid pickle) and then an opcode at 90% of it, each put back
# after; `inspect --json` runs alternate between the binaries. D holds
# vs.xz, vs-new.xz, gen_snapshot.xz and corrupt.py; run from the
# repository root; writes $OUT/log2.jsonl. About a minute on that machine.
set -u
D=${D:-xfer/h36}; M="python3 validation/snapshot_real/measure.py"; O=${O:-/tmp/b17b}; mkdir -p $O
L=$OUT/log2.jsonl; N=${N:-20000000}
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $L
for b in vs vs-new gen_snapshot; do xz -dc $D/$b.xz > $O/$b && chmod +x $O/$b; done
$M "gen_snapshot $N" $O/gen_snapshot --entries $N --max-entries $N --streams 3 --conf expandable_segments:True --out $O/s.pickle >> $L
F=$O/s.pickle; LF=$(stat -c %s $F)
echo "{\"label\": \"bytes\", \"bytes\": $LF}" >> $L
for r in 1 2; do
  $M "intact old" $O/vs inspect --json $F
  $M "intact new" $O/vs-new inspect --json $F
done >> $L
for k in value opcode; do
  python3 $D/corrupt.py $k $F $((LF * 9 / 10)) > $O/c.json && cat $O/c.json >> $L
  for r in 1 2 3; do
    $M "$k old" $O/vs inspect --json $F
    $M "$k new" $O/vs-new inspect --json $F
  done >> $L
  python3 $D/corrupt.py restore $F $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["at"], d["old"])' $O/c.json) >> $L
done
rm -f $F
cut -c1-300 $L
