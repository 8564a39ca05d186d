#!/usr/bin/env bash
# Issue #36, session 13, second GPU call: bench_s12.sh (OLD=main, NEW=s13), then
# s13's hooks build (measure_hooks_s13.patch: bench_s12's phases plus VS_LEXDIV,
# VS_LEXMIN, VS_DECDIV, VS_DECMIN overriding the piece sizes) on six settings,
# and pickle.load a third time per file. D holds vramscope-{main,s13}[-hooks].xz
# and c50/w50/p50.pickle.xz; run from the repository root.
D=xfer/h36; M=validation/snapshot_real/measure.py; O=/tmp/b13
for b in main main-hooks s13 s13-hooks; do xz -dc $D/vramscope-$b.xz > $D/vramscope-$b && chmod +x $D/vramscope-$b; done
REPS=${REPS:-5} MEASURE=$M bash validation/snapshot_large/bench_s12.sh $O $D main s13
for n in c50 w50 p50; do
  for cfg in "VS_LEXDIV=4" "VS_LEXDIV=8 VS_LEXMIN=262144" "VS_LEXDIV=16 VS_LEXMIN=262144" "VS_DECDIV=8" "VS_DECDIV=16" "VS_LEXDIV=8 VS_LEXMIN=262144 VS_DECDIV=8"; do
    t=$(echo $cfg | tr ' =' '_-')
    for r in 1 2 3; do env $cfg python3 $M "$n s13-hooks $t" $D/vramscope-s13-hooks inspect --json $O/$n.pickle; done
    for r in 1 2; do env $cfg VS_PT=1 $D/vramscope-s13-hooks inspect --json $O/$n.pickle 2>&1 >/dev/null | sed "s/^{/{\"file\": \"$n\", \"bin\": \"$t\", /"; done
  done
  python3 $M "$n pickle.load" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle
done
echo "{\"end_loadavg\": \"$(cat /proc/loadavg)\"}"
