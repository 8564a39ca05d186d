#!/bin/bash
# Issue #36, session 14, second GPU call (made ready, not run in session 14):
# m14 (65b1252, main before session 14) against s14 (the binary of session
# 14's last landing) on the five real snapshots (c50, w50, p50 and the c500,
# w500 of bench_s14.sh, as xz files), alternating run by run; `cmp` of both
# outputs; `pickle.load` (the 450 MB files side by side, the 50 MB ones
# alone); then s14's hooks build (measure_hooks_s14.patch: each phase's end
# with the main thread's CPU time, VmHWM and the process's minor page
# faults) on `--json` and `--html`; on the 450 MB files also s14 with
# mimalloc's purge delay at its default (1000 ms). D holds vramscope-{m14,s14,s14-hooks}.xz
# and NAME.pickle.xz; run from the repository root; FILES narrows it.
set -u
D=${D:-xfer/h36}; R=validation/snapshot_real; M="python3 $R/measure.py"; O=/tmp/b14b; mkdir -p $O
L=$OUT/log.jsonl
FILES=${FILES:-c50 w50 p50 c500 w500}
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"tmp_fs\": \"$(df -T /tmp | tail -1 | awk '{print $2}')\"}" >> $L
for b in m14 s14 s14-hooks; do xz -dc $D/vramscope-$b.xz > $O/vramscope-$b && chmod +x $O/vramscope-$b; done
for n in $FILES; do xz -T0 -dc $D/$n.pickle.xz > $O/$n.pickle & done; wait
for n in $FILES; do echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle)}"; done >> $L
pl() { $M "$1 pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$1.pickle; }
for n in $FILES; do case $n in *500) ( pl $n; pl $n ) > $O/$n.pl & ;; esac; done; wait
cat $O/*.pl >> $L 2>/dev/null
for n in $FILES; do case $n in *500) ;; *) pl $n; pl $n; pl $n ;; esac; done >> $L
for n in $FILES; do
  f=$O/$n.pickle reps=5; case $n in *500) reps=3;; esac
  for r in $(seq $reps); do
    for b in m14 s14; do $M "$n $b --json" $O/vramscope-$b inspect --json $f; done
    for b in m14 s14; do $M "$n $b --html" $O/vramscope-$b inspect --json --html $O/$b.html $f; done
  done >> $L
  for b in m14 s14; do $O/vramscope-$b inspect --json $f > $O/$b.json; done
  cmp $O/m14.json $O/s14.json && echo "{\"label\": \"$n --json same\"}" >> $L
  cmp $O/m14.html $O/s14.html && echo "{\"label\": \"$n --html same\"}" >> $L
  case $n in *500) for r in 1 2 3; do
    MIMALLOC_PURGE_DELAY=1000 $M "$n s14 --json purge1000" $O/vramscope-s14 inspect --json $f
  done >> $L;; esac
  for r in 1 2 3; do
    VS_PT=1 $O/vramscope-s14-hooks inspect --json $f 2>&1 >/dev/null | sed "s/^{/{\"file\": \"$n\", \"bin\": \"s14 --json\", /"
    VS_PT=1 $O/vramscope-s14-hooks inspect --json --html $O/h.html $f 2>&1 >/dev/null | sed "s/^{/{\"file\": \"$n\", \"bin\": \"s14 --html\", /"
  done >> $L
done
echo "{\"end_loadavg\": \"$(cat /proc/loadavg)\"}" >> $L
grep -v '"pt"' $L
