#!/bin/bash
# Issue #36, session 18, second call (helper snap): c50, w50, p50 recorded
# again (session 8's arguments, all three at once on the one GPU), then
# alone: `pickle.load` three times each, and `inspect --json`/`--html`
# with 9c0ba30's binary ("old") and main's after 0f20172 ("new": the page's
# data serialised without a value tree, the report's timeline left out)
# alternating, seven rounds. D holds vs.xz (old), vs-new.xz, record.py,
# measure.py (copies of validation/snapshot_real/record.py and measure.py);
# writes $OUT/log.jsonl. DRY=standin_s18.py as in bench_s18.sh.
set -u
D=${D:-xfer/snap}; O=${O:-/tmp/snapb}; mkdir -p $O
L=$OUT/log.jsonl; M="python3 $D/measure.py"; R=${ROUNDS:-7}
SECONDS=0
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $L
REC="python3 $D/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"
( $REC --out $O/c50.pickle --target-mb 50 > $O/c50.rec 2> $O/c50.err ) &
( PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $REC --out $O/w50.pickle --target-mb 50 --wrap --streams 3 --oom-at 0.7 > $O/w50.rec 2> $O/w50.err ) &
( $REC --out $O/p50.pickle --target-mb 50 --stacks python > $O/p50.rec 2> $O/p50.err ) &
for b in vs vs-new; do xz -dc $D/$b.xz > $O/$b && chmod +x $O/$b; done
wait
cat $O/*.rec >> $L; tail -n 2 $O/*.err
for n in c50 w50 p50; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle), \"s\": $SECONDS}" >> $L; done
for n in c50 w50 p50; do for r in 1 2 3; do $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done; done >> $L
for n in c50 w50 p50; do
  $O/vs inspect --json $O/$n.pickle > $O/$n.old.json; $O/vs-new inspect --json $O/$n.pickle > $O/$n.new.json
  echo "{\"label\": \"$n json same\", \"same\": $(cmp -s $O/$n.old.json $O/$n.new.json && echo true || echo false)}" >> $L
  for r in $(seq $R); do
    for b in vs vs-new; do
      $M "$n $b --json" $O/$b inspect --json $O/$n.pickle
      $M "$n $b --html" $O/$b inspect --json --html $O/$n.$b.html $O/$n.pickle
    done
  done >> $L
  echo "{\"label\": \"$n html bytes\", \"old\": $(stat -c %s $O/$n.vs.html), \"new\": $(stat -c %s $O/$n.vs-new.html)}" >> $L
done
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\"}" >> $L
cut -c1-200 $L | grep -v -- '--json"\|--html"'
