#!/bin/bash
# Issue #36, session 18, one call on the GPU machine: record c50, w50, p50,
# c500, w500 (the arguments of sessions 8 and 14) and g3, a complete ~3 GB
# nanoGPT trace (`--depth 500`: session 15's g3, sized to 3.2 GB), all at
# once on the one GPU; the 50 and 450 MB files' memory_viz (and the 450 MB
# ones' `pickle.load`) beside the recordings; then, alone: `pickle.load`
# of the 50 MB files, `inspect --json`/`--html` alternating on all six,
# `--range` and `diff`, `vramscope view` over HTTP (view_http.py), the
# errors of two damaged g3 copies (changed in place by corrupt.py and put
# back); last `pickle.load` and memory_viz of g3 beside each other, cut at
# END s. D holds vs.xz (main's binary, stripped) and copies of
# validation/snapshot_real/record.py, measure.py,
# validation/snapshot_large/corrupt.py and view_http.py; run from the
# repository root; writes $OUT/log.jsonl and $OUT/g3.inspect.json.xz.
# DRY=standin_s18.py (with GEN=gen_snapshot and DRYSCALE=100): a stand-in
# for record.py, to test this script without a GPU.
set -u
D=${D:-xfer/snap}; O=${O:-/tmp/snap}; mkdir -p $O
L=$OUT/log.jsonl; END=${END:-270}; G3MB=${G3MB:-3200}
M="python3 $D/measure.py"
SECONDS=0
lim() { local t=$((END - 8 - SECONDS)); echo $((t > 3 ? t : 3)); }
echo "{\"host\": \"$(nproc) CPUs,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)\", \"mem\": \"$(free -g | awk '/Mem/{print $2}') GiB\", \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"END\": $END, \"G3MB\": $G3MB}" >> $L
REC="python3 $D/record.py"; [ -n "${DRY:-}" ] && REC="python3 $DRY"
rec() {  # NAME ALLOC_CONF ARGS...
  local n=$1 c=$2; shift 2
  ( PYTORCH_CUDA_ALLOC_CONF=$c $REC --out $O/$n.pickle "$@" > $O/$n.rec 2> $O/$n.err
    echo "{\"label\": \"$n recorded\", \"s\": $SECONDS, \"rc\": $?}" >> $O/$n.rec ) &
}
rec g3 "" --target-mb $G3MB --depth 500 --max-seconds 70; PG=$!
rec c500 "" --target-mb 500 --max-seconds 80; P5="$!"
rec w500 expandable_segments:True --target-mb 500 --wrap --wrap-ratio 1.2 --streams 3 --oom-at 0.8 --max-seconds 80; P5="$P5 $!"
rec c50 "" --target-mb 50; PS="$!"
rec w50 expandable_segments:True --target-mb 50 --wrap --streams 3 --oom-at 0.7; PS="$PS $!"
rec p50 "" --target-mb 50 --stacks python; PS="$PS $!"
xz -dc $D/vs.xz > $O/vs && chmod +x $O/vs
$O/vs --version >> $L 2>&1
viz() {  # NAME: memory_viz, cut at END
  ( $M "$1 memory_viz" timeout $(lim) python3 -m torch.cuda._memory_viz trace_plot $O/$1.pickle -o $O/$1.viz.html > $O/$1.viz
    echo "{\"label\": \"$1 memory_viz html bytes\", \"bytes\": $(stat -c %s $O/$1.viz.html 2>/dev/null || echo 0), \"s\": $SECONDS}" >> $O/$1.viz
    rm -f $O/$1.viz.html ) &
}
wait $PS
VZ=""
for n in c50 w50 p50; do viz $n; VZ="$VZ $!"; done
wait $P5
for n in c500 w500; do
  viz $n; VZ="$VZ $!"
  ( $M "$n pickle.load" timeout $(lim) python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle > $O/$n.load ) &
  VZ="$VZ $!"
done
wait $PG
wait $VZ
cat $O/*.rec >> $L; cat $O/*.viz $O/*.load >> $L 2>/dev/null
for n in g3 c500 w500 c50 w50 p50; do tail -n 2 $O/$n.err; done
for n in c50 w50 p50 c500 w500 g3; do [ -s $O/$n.pickle ] && echo "{\"label\": \"$n bytes\", \"bytes\": $(stat -c %s $O/$n.pickle)}" >> $L; done
echo "{\"label\": \"alone from\", \"s\": $SECONDS, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >> $L
# alone: pickle.load of the 50 MB files, then vramscope
for n in c50 w50 p50; do for r in 1 2 3; do $M "$n pickle.load alone" python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $O/$n.pickle; done; done >> $L
for n in c50 w50 p50 c500 w500 g3; do
  [ -s $O/$n.pickle ] || continue
  $O/vs inspect --json $O/$n.pickle > $O/$n.inspect.json 2> $O/e || tail -c 300 $O/e
  reps=5; case $n in *500) reps=3;; g3) reps=3;; esac
  for r in $(seq $reps); do
    [ $((END - SECONDS)) -gt 40 ] || break
    $M "$n --json" $O/vs inspect --json $O/$n.pickle
    $M "$n --html" $O/vs inspect --json --html $O/$n.html $O/$n.pickle
  done >> $L
  echo "{\"label\": \"$n html bytes\", \"bytes\": $(stat -c %s $O/$n.html 2>/dev/null || echo 0), \"entries\": $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("trace_entries"))' $O/$n.inspect.json)}" >> $L
done
xz -c $O/g3.inspect.json > $OUT/g3.inspect.json.xz 2>/dev/null
F=$O/g3.pickle
if [ -s $F ]; then
  N=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trace_entries"])' $O/g3.inspect.json)
  N5=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["trace_entries"])' $O/c500.inspect.json)
  for r in 1 2; do
    $M "g3 --json --range $((N / 2))..$((N / 2 + 100000))" $O/vs inspect --json --range $((N / 2))..$((N / 2 + 100000)) $F
    $M "diff --json g3 c500" $O/vs diff --json $F $O/c500.pickle
    $M "diff --json c500 w500" $O/vs diff --json $O/c500.pickle $O/w500.pickle
    $M "c500 --json --range $((N5 / 2))..$((N5 / 2 + 100000))" $O/vs inspect --json --range $((N5 / 2))..$((N5 / 2 + 100000)) $O/c500.pickle
  done >> $L
  echo "{\"label\": \"view from\", \"s\": $SECONDS}" >> $L
  timeout $(( $(lim) > 60 ? 60 : $(lim) )) python3 $D/view_http.py $O/vs $F 3 >> $L 2>> $O/view.err; tail -n 3 $O/view.err
  LF=$(stat -c %s $F)
  for k in value opcode; do
    python3 $D/corrupt.py $k $F $((LF * 9 / 10)) > $O/c.json && cat $O/c.json >> $L || continue
    for r in 1 2; do $M "g3 corrupt $k --json" $O/vs inspect --json $F; done >> $L
    python3 $D/corrupt.py restore $F $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["at"], d["old"])' $O/c.json) >> $L
  done
  echo "{\"label\": \"python tools from\", \"s\": $SECONDS}" >> $L
  ( $M "g3 pickle.load" timeout $(lim) python3 -c 'import pickle, sys; pickle.load(open(sys.argv[1], "rb"))' $F > $O/g3.load ) &
  PL=$!
  viz g3; wait $PL $!
  cat $O/g3.load $O/g3.viz >> $L
fi
echo "{\"end\": $SECONDS, \"end_loadavg\": \"$(cat /proc/loadavg)\", \"mem_used_gib\": $(free -g | awk '/Mem/{print $3}')}" >> $L
cut -c1-260 $L
