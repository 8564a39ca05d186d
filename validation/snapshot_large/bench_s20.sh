#!/bin/bash
# Issue #36, session 20 (helper snap), one call on the GPU machine:
# 1. record c50, w50, p50 (session 8's arguments) and B, a long plain
#    nanoGPT run (default stacks, complete: max_entries unbounded), all at
#    once on the one GPU; B trains for BSEC seconds of wall time, then dumps;
# 2. while B is stopped (SIGSTOP), alone: `pickle.load` of the 50 MB files
#    three times each; `inspect --json`/`--html` ROUNDS rounds; the phases
#    (VS_PT=1, two runs a file, 16 and 8 cores); `--json` on 8 and 4 cores
#    (taskset); the piece-size knobs, and the exec that sets
#    MIMALLOC_PURGE_DELAY=0 skipped. One binary, "vs": main's code built
#    with measure_hooks_s20.patch (VS_PT unset: main's work but for a few
#    getenv); the working tree that travels leaves room for one.
# 3. B continued, dumped; then alone: `inspect --json`/`--html` three times
#    each, `--range` of 100,000 entries mid-trace and `diff` of B with
#    itself twice each;
# 4. `pickle.load` and memory_viz of B beside each other, cut at END s.
# D holds vs.xz (that binary, stripped), record.py and
# measure.py (copies of validation/snapshot_real/); writes $OUT/log.jsonl,
# $OUT/phases.jsonl and $OUT/B.inspect.json.xz. DRY=standin_s18.py (with
# GEN=gen_snapshot and DRYSCALE=100) stands in for record.py without a GPU.
set -u
D=${D:-xfer/snap}; O=${O:-/tmp/snapb}; mkdir -p $O
L=$OUT/log.jsonl; P=$OUT/phases.jsonl; END=${END:-248}; BSEC=${BSEC:-125}; R=${ROUNDS:-7}
M="python3 $D/measure.py"
SECONDS=0
lim() { local t=$((END - 3 - SECONDS)); echo $((t > 3 ? t : 3)); }
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"mem\": \"$(free -g | awk '/Mem/{print $2}') GiB\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"END\": $END, \"BSEC\": $BSEC}" >> $L
REC="python3 $D/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"
rec() {  # NAME ALLOC_CONF ARGS...
  local n=$1 c=$2; shift 2
  ( PYTORCH_CUDA_ALLOC_CONF=$c exec $REC --out $O/$n.pickle "$@" > $O/$n.rec 2> $O/$n.err ) &
}
rec B "" --target-mb 3200 --max-seconds $BSEC; PB=$!
rec c50 "" --target-mb 50; PS="$!"
rec w50 expandable_segments:True --target-mb 50 --wrap --streams 3 --oom-at 0.7; PS="$PS $!"
rec p50 "" --target-mb 50 --stacks python; PS="$PS $!"
xz -dc $D/vs.xz > $O/vs && chmod +x $O/vs
wait $PS
kill -STOP $PB; echo "{\"label\": \"B stopped\", \"s\": $SECONDS}" >> $L
cat $O/c50.rec $O/w50.rec $O/p50.rec >> $L; tail -n 2 $O/c50.err $O/w50.err $O/p50.err
for n in c50 w50 p50; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle)}" >> $L; cat $O/$n.pickle > /dev/null; done
for n in c50 w50 p50; do for r in 1 2 3; do $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done; done >> $L
for n in c50 w50 p50; do
  $O/vs inspect --json $O/$n.pickle > $O/$n.json
  echo "{\"label\": \"$n entries\", \"entries\": $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("trace_entries"))' $O/$n.json)}" >> $L
  for r in $(seq $R); do
    $M "$n vs --json" $O/vs inspect --json $O/$n.pickle
    $M "$n vs --html" $O/vs inspect --json --html $O/$n.html $O/$n.pickle
  done >> $L
  echo "{\"label\": \"$n html bytes\", \"bytes\": $(stat -c %s $O/$n.html)}" >> $L
done
for n in c50 w50 p50; do for r in 1 2; do
  echo "{\"phases\": \"$n --json\", \"run\": $r}" >> $P; VS_PT=1 $O/vs inspect --json $O/$n.pickle 2>> $P > /dev/null
  echo "{\"phases\": \"$n --json, 8 cores\", \"run\": $r}" >> $P; VS_PT=1 taskset -c 0-7 $O/vs inspect --json $O/$n.pickle 2>> $P > /dev/null
done; done
for n in c50 w50 p50; do for r in 1 2 3; do for c in 0-7 0-3; do
  $M "$n vs --json cores $c" taskset -c $c $O/vs inspect --json $O/$n.pickle
done; done; done >> $L
# the hooks build's knobs (piece sizes of the lex and the decoder), and the
# exec that sets MIMALLOC_PURGE_DELAY=0 skipped (set beforehand: the same
# allocator settings)
for n in c50 w50 p50; do for r in 1 2 3; do
  for k in "X=0" "VS_LEXMIN=262144" "VS_LEXMIN=262144 VS_LEXDIV=8" "VS_DECDIV=8" "VS_DECDIV=2" "VS_DECMIN=65536 VS_DECDIV=8" "MIMALLOC_PURGE_DELAY=0"; do
    env $k $M "$n vs --json $k" $O/vs inspect --json $O/$n.pickle
  done
done; done >> $L
echo "{\"label\": \"B continued\", \"s\": $SECONDS}" >> $L; kill -CONT $PB
wait $PB; cat $O/B.rec >> $L; tail -n 3 $O/B.err
F=$O/B.pickle
[ -s $F ] || { echo "no B"; cut -c1-200 $L; exit 0; }
echo "{\"label\": \"B bytes\", \"bytes\": $(stat -c %s $F), \"s\": $SECONDS}" >> $L
cat $F > /dev/null
$O/vs inspect --json $F > $O/B.inspect.json; xz -c $O/B.inspect.json > $OUT/B.inspect.json.xz
N=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trace_entries"])' $O/B.inspect.json)
echo "{\"label\": \"B entries\", \"entries\": $N}" >> $L
for r in 1 2 3; do
  $M "B vs --json" $O/vs inspect --json $F
  $M "B vs --html" $O/vs inspect --json --html $O/B.html $F
done >> $L
echo "{\"label\": \"B html bytes\", \"bytes\": $(stat -c %s $O/B.html)}" >> $L
for r in 1 2; do
  $M "B vs --json --range $((N / 2))..$((N / 2 + 100000))" $O/vs inspect --json --range $((N / 2))..$((N / 2 + 100000)) $F
  $M "B vs diff --json B B" $O/vs diff --json $F $F
done >> $L
echo "{\"phases\": \"B --json\", \"run\": 1}" >> $P; VS_PT=1 $O/vs inspect --json $F 2>> $P > /dev/null
echo "{\"label\": \"python tools from\", \"s\": $SECONDS}" >> $L
( $M "B pickle.load" timeout $(lim) python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $F > $O/B.load ) &
PL=$!
$M "B memory_viz" timeout $(lim) python3 -m torch.cuda._memory_viz trace_plot $F -o $O/B.viz.html > $O/B.viz
wait $PL
cat $O/B.load $O/B.viz >> $L
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cut -c1-220 $L | grep -v -- '--json"\|--html"'
