#!/bin/bash
# Issue #36, session 21 (helper snap, second call): the timeline's pass run
# while the rest of the file is read (`read_snapshot_file_early`), A/B on
# the 50 MB files, one call on the GPU machine:
# 1. record c50, w50, p50 (session 8's arguments) at once on the one GPU;
# 2. alone: `pickle.load` of each three times; both binaries' `--json` and
#    `--html` outputs (md5); `inspect --json` and `--json --html` of each
#    file ROUNDS rounds, main's binary ("old") and this branch's ("new")
#    alternating, run by run.
# D holds old.xz, new.xz (stripped binaries), record.py and measure.py
# (copies of validation/snapshot_real/); writes $OUT/log.jsonl.
set -u
D=${D:-xfer/snap}; O=${O:-/tmp/snapb}; mkdir -p $O
L=$OUT/log.jsonl; R=${ROUNDS:-7}
M="python3 $D/measure.py"
SECONDS=0
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"mem\": \"$(free -g | awk '/Mem/{print $2}') GiB\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $L
REC="python3 $D/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"
rec() {  # NAME ALLOC_CONF ARGS...
  local n=$1 c=$2; shift 2
  ( PYTORCH_CUDA_ALLOC_CONF=$c exec $REC --out $O/$n.pickle "$@" > $O/$n.rec 2> $O/$n.err ) &
}
rec c50 "" --target-mb 50; PS="$!"
rec w50 expandable_segments:True --target-mb 50 --wrap --streams 3 --oom-at 0.7; PS="$PS $!"
rec p50 "" --target-mb 50 --stacks python; PS="$PS $!"
for b in old new; do xz -dc $D/$b.xz > $O/$b && chmod +x $O/$b; done
wait $PS
echo "{\"label\": \"recorded\", \"s\": $SECONDS}" >> $L
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
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\"}" >> $L
cut -c1-200 $L | grep -v -- '--json"\|--html"'
