#!/bin/bash
# Issue #36, session 14, first GPU call: record c500 and w500 (record.py with
# bench.sh's arguments, both at once on the one GPU), bring them back xz-compressed
# (split at 16 MB), then time main (65b1252, "m14") on the five files beside
# pickle.load and memory_viz. D holds vramscope-m14[-hooks].xz (the hooks build:
# measure_hooks_s13.patch) and c50/w50/p50.pickle.xz; run from the repository root.
set -u
D=xfer/h36; R=validation/snapshot_real; M="python3 $R/measure.py"; O=/tmp/b14; mkdir -p $O
L=$OUT/log.jsonl
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"torch\": \"$(python3 -c 'import torch; print(torch.__version__)')\"}" >> $L
for b in m14 m14-hooks; do xz -dc $D/vramscope-$b.xz > $D/vramscope-$b && chmod +x $D/vramscope-$b; done
SECONDS=0
( python3 $R/record.py --out $O/c500.pickle --target-mb 500 --max-seconds 80 > $O/c500.record 2> $O/c500.err ) &
( PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 $R/record.py --out $O/w500.pickle --target-mb 500 --wrap --wrap-ratio 1.2 --streams 3 --oom-at 0.8 --max-seconds 80 > $O/w500.record 2> $O/w500.err ) &
for n in c50 w50 p50; do xz -dc $D/$n.pickle.xz > $O/$n.pickle; done
wait
echo "{\"label\": \"recorded\", \"s\": $SECONDS}" >> $L
cat $O/c500.record $O/w500.record >> $L; tail -n 3 $O/*.err
ls -la $O
for n in c500 w500; do
  ( python3 $R/stats.py $O/$n.pickle > $O/$n.stats 2>&1 ) &
  xz -T16 -6 -c $O/$n.pickle > $O/$n.pickle.xz && split -b 16000000 $O/$n.pickle.xz $OUT/$n.pickle.xz.
done
wait; cat $O/c500.stats $O/w500.stats >> $L
ls -la $OUT
# Python's tools on the large files, each file's chain beside the other's
for n in c500 w500; do
  ( timeout 150 $M "$n memory_viz" python3 -m torch.cuda._memory_viz trace_plot $O/$n.pickle -o $O/$n.viz.html > $O/$n.viz; echo "{\"label\": \"$n memory_viz html bytes\", \"bytes\": $(stat -c %s $O/$n.viz.html)}" >> $O/$n.viz; rm -f $O/$n.viz.html ) &
  ( for r in 1 2; do $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done > $O/$n.pl ) &
done
wait; cat $O/*.viz $O/*.pl >> $L
for n in c50 w50 p50; do for r in 1 2 3; do $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done; done >> $L
for n in c50 w50 p50 c500 w500; do
  reps=5; case $n in *500) reps=3;; esac
  for r in $(seq $reps); do
    $M "$n m14 --json" $D/vramscope-m14 inspect --json $O/$n.pickle
    $M "$n m14 --html" $D/vramscope-m14 inspect --json --html $O/m14.html $O/$n.pickle
  done >> $L
  echo "{\"label\": \"$n html bytes\", \"bytes\": $(stat -c %s $O/m14.html)}" >> $L
  for r in 1 2; do VS_PT=1 $D/vramscope-m14-hooks inspect --json $O/$n.pickle 2>&1 >/dev/null | sed "s/^{/{\"file\": \"$n\", \"bin\": \"m14\", /"; done >> $L
done
echo "{\"end_loadavg\": \"$(cat /proc/loadavg)\"}" >> $L
ls -la $OUT; tail -n 40 $L
