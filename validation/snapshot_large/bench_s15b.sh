#!/bin/bash
# Issue #36, session 15, second call: snapshots of several GB. Records at
# once on the one GPU a complete c1g (bench_s15.sh's arguments, for
# memory_viz) and two ~3 GB files from the same run under 500 more Python
# frames per step (record.py --depth 500, taken from D; the plain run makes ~11 MB/s of
# pickle): g3 complete, g3w wrapped (3 streams, expandable segments, an
# OOM). Then main's `inspect --json`/`--html` (three runs each, alternating)
# on g3 and g3w, memory_viz on c1g (started as soon as c1g is written, so it
# runs beside the rest) and pickle.load on g3 once. D holds vs-main.xz; run
# from the repository root; writes $OUT/log.jsonl and g3's and g3w's
# `inspect --json` outputs. Every step is skipped or cut to end by END s.
set -u
D=${D:-xfer/h36}; R=validation/snapshot_real; M="python3 $R/measure.py"; O=/tmp/b15b; mkdir -p $O
L=$OUT/log.jsonl; END=${END:-185}
SECONDS=0
left() { echo $((END - SECONDS)); }
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"mem\": \"$(free -g | awk '/Mem/{print $2}') GiB\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"torch\": \"$(python3 -c 'import torch, sys; print(torch.__version__, sys.version.split()[0])')\"}" >> $L
REC="python3 $D/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"  # DRY: a stand-in that copies files
( timeout 160 $REC --out $O/c1g.pickle --target-mb 1250 --max-seconds 80 > $O/c1g.record 2> $O/c1g.err ) &
P0=$!
( timeout 175 $REC --out $O/g3.pickle --target-mb 3000 --depth 500 --max-seconds 70 > $O/g3.record 2> $O/g3.err ) &
P1=$!
( PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 175 $REC --out $O/g3w.pickle --target-mb 3000 --depth 500 --wrap --wrap-ratio 1.2 --streams 3 --oom-at 0.8 --max-seconds 75 > $O/g3w.record 2> $O/g3w.err ) &
P2=$!
xz -dc $D/vs-main.xz > $O/vs-main && chmod +x $O/vs-main
wait $P0
echo "{\"label\": \"c1g recorded\", \"s\": $SECONDS, \"rc\": $?}" >> $L
cat $O/c1g.record >> $L; tail -n 3 $O/c1g.err
if [ -s $O/c1g.pickle ] && grep -q '"steps"' $O/c1g.record; then
  echo "{\"label\": \"c1g bytes\", \"bytes\": $(stat -c %s $O/c1g.pickle)}" >> $L
  ( timeout $(( $(left) > 5 ? $(left) : 5 )) $M "c1g memory_viz" python3 -m torch.cuda._memory_viz trace_plot $O/c1g.pickle -o $O/c1g.viz.html > $O/c1g.viz; r=$?
    echo "{\"label\": \"c1g memory_viz html bytes\", \"bytes\": $(stat -c %s $O/c1g.viz.html 2>/dev/null || echo 0), \"rc\": $r, \"s\": $SECONDS}" >> $O/c1g.viz; rm -f $O/c1g.viz.html ) &
  PV=$!
fi
wait $P1 $P2
echo "{\"label\": \"g3 g3w recorded\", \"s\": $SECONDS, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cat $O/g3.record $O/g3w.record >> $L; tail -n 3 $O/g3.err $O/g3w.err
for n in g3 g3w; do [ -s $O/$n.pickle ] && echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle)}"; done >> $L
# main's inspect: g3, then g3w, json and html alternating
for n in g3 g3w; do
  [ -s $O/$n.pickle ] || continue
  $O/vs-main inspect --json $O/$n.pickle > $OUT/$n.inspect.json 2> $O/$n.inspect.err; tail -c 300 $O/$n.inspect.err
  for r in 1 2 3; do
    [ $(left) -gt 25 ] || break
    $M "$n main --json" $O/vs-main inspect --json $O/$n.pickle
    $M "$n main --html" $O/vs-main inspect --json --html $O/$n.html $O/$n.pickle
  done >> $L
  echo "{\"label\": \"$n html bytes\", \"bytes\": $(stat -c %s $O/$n.html 2>/dev/null || echo 0), \"s\": $SECONDS}" >> $L
done
[ -s $O/c1g.pickle ] && $M "c1g main --json" $O/vs-main inspect --json $O/c1g.pickle >> $L
# pickle.load on g3 once, cut at END
if [ -s $O/g3.pickle ] && [ $(left) -gt 10 ]; then
  timeout $(left) $M "g3 pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/g3.pickle >> $L
  echo "{\"label\": \"g3 pickle.load ended\", \"s\": $SECONDS, \"rc\": $?}" >> $L
fi
[ -n "${PV:-}" ] && wait $PV; cat $O/c1g.viz >> $L 2>/dev/null
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\"}" >> $L
grep -v '"pt"' $L | cut -c1-400
