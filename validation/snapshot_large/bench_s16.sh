#!/bin/bash
# Issue #36, session 16, one call: the measurements session 15 left out.
# Records at once on the one GPU a plain-stack snapshot of about 2 GB
# (`p2g`: the nanoGPT run with its default stacks, complete, training cut
# at PSEC s) and `g3w` again (session 15's arguments: 500 more Python frames
# per step, wrapped, 3 streams, expandable segments, an OOM). As soon as
# g3w is written: memory_viz trace_plot and pickle.load on it (beside each
# other), main's `inspect --json`/`--html` three times each. As soon as p2g
# is written: memory_viz and pickle.load on it in the background, main's
# inspect three times each. D holds vs-main.xz; run from the repository
# root; writes $OUT/log.jsonl and p2g's `inspect --json`. Everything is cut
# to end by END s; a cut tool's line has rc 124 and its wall is a lower
# bound (measure.py times `timeout`, which waits for the tool: wait4's
# rusage holds the tool's CPU and peak RSS).
set -u
D=${D:-xfer/h36}; R=validation/snapshot_real; M="python3 $R/measure.py"; O=/tmp/b16; mkdir -p $O
L=$OUT/log.jsonl; END=${END:-270}; PSEC=${PSEC:-135}
SECONDS=0
lim() { local t=$((END - SECONDS)); echo $((t > 5 ? t : 5)); }
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"mem\": \"$(free -g | awk '/Mem/{print $2}') GiB\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"torch\": \"$(python3 -c 'import torch, sys; print(torch.__version__, sys.version.split()[0])')\"}" >> $L
REC="python3 $R/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"  # DRY: a stand-in that copies files
( timeout $((END - 20)) $REC --out $O/p2g.pickle --target-mb 3000 --max-seconds $PSEC > $O/p2g.record 2> $O/p2g.err ) &
P0=$!
( PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 175 $REC --out $O/g3w.pickle --target-mb 3000 --depth 500 --wrap --wrap-ratio 1.2 --streams 3 --oom-at 0.8 --max-seconds 75 > $O/g3w.record 2> $O/g3w.err ) &
P1=$!
xz -dc $D/vs-main.xz > $O/vs-main && chmod +x $O/vs-main
# viz NAME: memory_viz on NAME in the background, its line to $O/NAME.viz
viz() {
  ( $M "$1 memory_viz" timeout $(lim) python3 -m torch.cuda._memory_viz trace_plot $O/$1.pickle -o $O/$1.viz.html > $O/$1.viz
    echo "{\"label\": \"$1 memory_viz html bytes\", \"bytes\": $(stat -c %s $O/$1.viz.html 2>/dev/null || echo 0), \"s\": $SECONDS}" >> $O/$1.viz
    rm -f $O/$1.viz.html ) &
}
load() {
  ( $M "$1 pickle.load" timeout $(lim) python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$1.pickle > $O/$1.load ) &
}
# main's inspect on NAME, json and html alternating, three runs each
insp() {
  for r in 1 2 3; do
    [ $((END - SECONDS)) -gt 6 ] || break
    $M "$1 main --json" $O/vs-main inspect --json $O/$1.pickle
    $M "$1 main --html" $O/vs-main inspect --json --html $O/$1.html $O/$1.pickle
  done >> $L
  echo "{\"label\": \"$1 html bytes\", \"bytes\": $(stat -c %s $O/$1.html 2>/dev/null || echo 0), \"s\": $SECONDS}" >> $L
}
wait $P1
echo "{\"label\": \"g3w recorded\", \"s\": $SECONDS, \"rc\": $?}" >> $L
cat $O/g3w.record >> $L; tail -n 3 $O/g3w.err
PIDS=""
if [ -s $O/g3w.pickle ] && grep -q '"steps"' $O/g3w.record; then
  echo "{\"label\": \"g3w bytes\", \"bytes\": $(stat -c %s $O/g3w.pickle)}" >> $L
  viz g3w; PIDS="$PIDS $!"
  load g3w; PIDS="$PIDS $!"
  insp g3w
fi
wait $P0
echo "{\"label\": \"p2g recorded\", \"s\": $SECONDS, \"rc\": $?, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cat $O/p2g.record >> $L; tail -n 3 $O/p2g.err
if [ -s $O/p2g.pickle ] && grep -q '"steps"' $O/p2g.record; then
  echo "{\"label\": \"p2g bytes\", \"bytes\": $(stat -c %s $O/p2g.pickle)}" >> $L
  viz p2g; PIDS="$PIDS $!"
  load p2g; PIDS="$PIDS $!"
  $O/vs-main inspect --json $O/p2g.pickle > $OUT/p2g.inspect.json 2> $O/p2g.inspect.err; tail -c 300 $O/p2g.inspect.err
  insp p2g
fi
wait $PIDS
cat $O/*.load $O/*.viz >> $L 2>/dev/null
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cut -c1-400 $L
