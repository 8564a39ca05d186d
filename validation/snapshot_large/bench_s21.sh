#!/bin/bash
# Issue #36, session 21 (helper snap), one call on the GPU machine:
# 1. record c50, w50, p50 (session 8's arguments) and B, a long plain
#    nanoGPT run (default stacks, Python and C++; max_entries unbounded, so
#    complete), all at once on the one GPU; B trains for BSEC seconds of
#    wall time (the stop below included), then dumps;
# 2. while B is stopped (SIGSTOP), alone: `pickle.load` of the 50 MB files
#    three times each; `inspect --json` and `--json --html` of each file
#    ROUNDS rounds, main's binary ("old") and this branch's ("new")
#    alternating, run by run; the phases of the new one (a build with
#    measure_hooks_s20.patch, VS_PT=1), two runs a file;
# 3. B continued and dumped; then alone: old and new `--json` twice each,
#    alternating, new `--json --html`, `--range` of 100,000 entries
#    mid-trace twice each, `diff` of B with itself once, the phases once;
# 4. `pickle.load` and memory_viz `trace_plot` of B beside each other, each
#    cut at END s since the start.
# D holds old.xz, new.xz, hooks.xz (stripped binaries), record.py and
# measure.py (copies of validation/snapshot_real/); writes $OUT/log.jsonl,
# $OUT/phases.jsonl and $OUT/B.inspect.json.xz. DRY=standin_s18.py (with
# GEN=gen_snapshot and DRYSCALE=100) stands in for record.py without a GPU.
set -u
D=${D:-xfer/snap}; O=${O:-/tmp/snapb}; mkdir -p $O
L=$OUT/log.jsonl; P=$OUT/phases.jsonl; END=${END:-385}; BSEC=${BSEC:-200}; R=${ROUNDS:-7}
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
for b in old new hooks; do xz -dc $D/$b.xz > $O/$b && chmod +x $O/$b; done
wait $PS
kill -STOP $PB; echo "{\"label\": \"B stopped\", \"s\": $SECONDS}" >> $L
cat $O/c50.rec $O/w50.rec $O/p50.rec >> $L; tail -n 2 $O/c50.err $O/w50.err $O/p50.err
for n in c50 w50 p50; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle)}" >> $L; cat $O/$n.pickle > /dev/null; done
for n in c50 w50 p50; do for r in 1 2 3; do $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done; done >> $L
for n in c50 w50 p50; do
  for b in old new; do
    $O/$b inspect --json --html $O/$n.$b.html $O/$n.pickle > $O/$n.$b.json
    echo "{\"label\": \"$n $b out\", \"json\": \"$(md5sum < $O/$n.$b.json | cut -c1-12)\", \"html\": \"$(md5sum < $O/$n.$b.html | cut -c1-12)\", \"html_bytes\": $(stat -c %s $O/$n.$b.html)}" >> $L
  done
  echo "{\"label\": \"$n entries\", \"entries\": $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("trace_entries"))' $O/$n.new.json)}" >> $L
  for r in $(seq $R); do for b in old new; do
    $M "$n $b --json" $O/$b inspect --json $O/$n.pickle
    $M "$n $b --html" $O/$b inspect --json --html $O/$n.html $O/$n.pickle
  done; done >> $L
done
for n in c50 w50 p50; do for r in 1 2; do
  echo "{\"phases\": \"$n --json\", \"run\": $r}" >> $P; VS_PT=1 $O/hooks inspect --json $O/$n.pickle 2>> $P > /dev/null
done; done
echo "{\"label\": \"B continued\", \"s\": $SECONDS}" >> $L; kill -CONT $PB
wait $PB; cat $O/B.rec >> $L; tail -n 3 $O/B.err
F=$O/B.pickle
[ -s $F ] || { echo "no B"; cut -c1-200 $L; exit 0; }
echo "{\"label\": \"B bytes\", \"bytes\": $(stat -c %s $F), \"s\": $SECONDS}" >> $L
cat $F > /dev/null
$O/new inspect --json $F > $O/B.inspect.json; xz -c $O/B.inspect.json > $OUT/B.inspect.json.xz
N=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trace_entries"])' $O/B.inspect.json)
echo "{\"label\": \"B entries\", \"entries\": $N, \"s\": $SECONDS}" >> $L
for r in 1 2; do
  $M "B old --json" $O/old inspect --json $F
  $M "B new --json" $O/new inspect --json $F
done >> $L
for r in 1 2; do
  $M "B new --html" $O/new inspect --json --html $O/B.html $F
  $M "B new --json --range $((N / 2))..$((N / 2 + 100000))" $O/new inspect --json --range $((N / 2))..$((N / 2 + 100000)) $F
done >> $L
echo "{\"label\": \"B html bytes\", \"bytes\": $(stat -c %s $O/B.html)}" >> $L
$M "B new diff --json B B" $O/new diff --json $F $F >> $L
echo "{\"phases\": \"B --json\", \"run\": 1}" >> $P; VS_PT=1 $O/hooks inspect --json $F 2>> $P > /dev/null
echo "{\"label\": \"python tools from\", \"s\": $SECONDS}" >> $L
( $M "B pickle.load" timeout $(lim) python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $F > $O/B.load ) &
PL=$!
$M "B memory_viz" timeout $(lim) python3 -m torch.cuda._memory_viz trace_plot $F -o $O/B.viz.html > $O/B.viz
wait $PL
cat $O/B.load $O/B.viz >> $L
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cut -c1-220 $L | grep -v -- '--json"\|--html"'
