#!/bin/bash
# Issue #36, session 15, one GPU call: record c500 and w500 (bench_s14.sh's
# arguments) and a complete ~1 GB c1g, all three at once on the one GPU; then
# pickle.load beside memory_viz on c500/w500; main's `inspect --json` and
# `--html` alternating c500/w500 run by run; main's hooks build
# (measure_hooks_s14.patch) for the phases; the timeline pass alone
# (crates/cli/examples/timeline_passes.rs) with freed memory given back at once and
# kept; then c1g when recorded in time. D holds vs-main.xz, vs-main-hooks.xz,
# tp.xz (stripped, xz); run from the repository root; writes $OUT/log.jsonl.
# DRY=stand-in.py replaces record.py (a script that copies files) for a dry run.
set -u
D=${D:-xfer/h36}; R=validation/snapshot_real; M="python3 $R/measure.py"; O=/tmp/b15; mkdir -p $O
L=$OUT/log.jsonl
SECONDS=0
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"thp\": \"$(cat /sys/kernel/mm/transparent_hugepage/enabled)\", \"torch\": \"$(python3 -c 'import torch; print(torch.__version__)')\", \"caches\": \"$(lscpu | grep -i 'cache' | tr -s ' ' | tr '\n' ';')\", \"perf\": \"$(command -v perf)\"}" >> $L
REC="python3 $R/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"  # DRY: a stand-in that copies files
( $REC --out $O/c500.pickle --target-mb 500 --max-seconds 80 > $O/c500.record 2> $O/c500.err ) &
P1=$!
( PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $REC --out $O/w500.pickle --target-mb 500 --wrap --wrap-ratio 1.2 --streams 3 --oom-at 0.8 --max-seconds 80 > $O/w500.record 2> $O/w500.err ) &
P2=$!
( timeout 150 $REC --out $O/c1g.pickle --target-mb 1250 --max-seconds 85 > $O/c1g.record 2> $O/c1g.err; echo "{\"label\": \"c1g recorded\", \"s\": $SECONDS}" >> $O/c1g.record ) &
for b in vs-main vs-main-hooks tp; do xz -dc $D/$b.xz > $O/$b && chmod +x $O/$b; done
wait $P1 $P2
echo "{\"label\": \"c500 w500 recorded\", \"s\": $SECONDS}" >> $L
cat $O/c500.record $O/w500.record >> $L; tail -n 2 $O/c500.err $O/w500.err
for n in c500 w500; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle)}"; done >> $L
# Python's tools, each file's chain beside the other's (as in session 14)
VIZ=""
for n in c500 w500; do
  ( timeout 100 $M "$n memory_viz" python3 -m torch.cuda._memory_viz trace_plot $O/$n.pickle -o $O/$n.viz.html > $O/$n.viz; echo "{\"label\": \"$n memory_viz html bytes\", \"bytes\": $(stat -c %s $O/$n.viz.html 2>/dev/null || echo 0)}" >> $O/$n.viz; rm -f $O/$n.viz.html ) &
  VIZ="$VIZ $!"
  ( for r in 1 2; do $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done > $O/$n.pl ) &
  VIZ="$VIZ $!"
done
wait $VIZ
cat $O/c500.viz $O/w500.viz $O/c500.pl $O/w500.pl >> $L
echo "{\"label\": \"python tools done\", \"s\": $SECONDS, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $L
# main's inspect, c500 and w500 alternating run by run
for r in 1 2 3 4 5; do
  for n in c500 w500; do
    $M "$n main --json" $O/vs-main inspect --json $O/$n.pickle
    $M "$n main --html" $O/vs-main inspect --json --html $O/$n.html $O/$n.pickle
  done
done >> $L
for n in c500 w500; do echo "{\"label\": \"$n html bytes\", \"bytes\": $(stat -c %s $O/$n.html)}"; done >> $L
for r in 1 2 3; do for n in c500 w500; do
  VS_PT=1 $O/vs-main-hooks inspect --json $O/$n.pickle 2>&1 >/dev/null | sed "s/^{/{\"file\": \"$n\", \"bin\": \"main --json\", /"
done; done >> $L
for n in c500 w500; do
  MIMALLOC_PURGE_DELAY=0 $O/tp $O/$n.pickle 7 | sed 's/^{/{"purge_delay": 0, /'
  MIMALLOC_PURGE_DELAY=1000 $O/tp $O/$n.pickle 7 | sed 's/^{/{"purge_delay": 1000, /'
done >> $L
echo "{\"label\": \"c500 w500 done\", \"s\": $SECONDS, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $L
# the larger file, when recorded in time
while [ ! -s $O/c1g.record ] && [ $SECONDS -lt 160 ]; do sleep 1; done
cat $O/c1g.record >> $L; tail -n 2 $O/c1g.err
if [ -s $O/c1g.pickle ] && [ $SECONDS -lt 170 ] && grep -q '"steps"' $O/c1g.record; then
  echo "{\"label\": \"c1g bytes\", \"bytes\": $(stat -c %s $O/c1g.pickle), \"s\": $SECONDS}" >> $L
  $M "c1g pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/c1g.pickle >> $L
  for r in 1 2 3; do
    $M "c1g main --json" $O/vs-main inspect --json $O/c1g.pickle
    $M "c1g main --html" $O/vs-main inspect --json --html $O/c1g.html $O/c1g.pickle
  done >> $L
  echo "{\"label\": \"c1g html bytes\", \"bytes\": $(stat -c %s $O/c1g.html)}" >> $L
  VS_PT=1 $O/vs-main-hooks inspect --json $O/c1g.pickle 2>&1 >/dev/null | sed "s/^{/{\"file\": \"c1g\", \"bin\": \"main --json\", /" >> $L
  MIMALLOC_PURGE_DELAY=0 $O/tp $O/c1g.pickle 3 | sed 's/^{/{"purge_delay": 0, /' >> $L
fi
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\"}" >> $L
grep -v '"pt"' $L | cut -c1-400
