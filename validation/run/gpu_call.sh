#!/bin/bash
# One GPU call that batches a session's measurements, each part optional, into $OUT/res.tar.xz:
#   PLAN=FILE      record_lanes.py's lanes of blind scripts (record_lanes.sh, DEADLINE= seconds a lane)
#   CONV=FILE      conv_sweep.py run over FILE's problems, 2 workers (CSSEC= seconds, default 150)
#   TRUTH="N ..."  truth.sh's per-op truth (OPS_TRUTH_ALL=1) of the named scripts (TSEC=, TRUTH_JOBS=)
#   PROBES="P ..." probes/P.py, one after another, each to probes/P_GPU.out (90 s each); P:D/S runs
#                  probes/P.py on the blind script D/S_*.py, to probes/P_S_GPU.out
#   HIST="D/P ..." history.py (CONTEXT=none) of validation/run/D/P_*.py, to hist/history_P_GPU.pickle.xz (HSEC= s each)
#   BENCH=FILE     then, alone on the GPU, conv_sweep.py run-benchmark over FILE, 4 workers (BMSEC=)
# The first five run at once; the benchmark sweep waits for them (its search workspaces depend on the
# device's free memory). Paths are relative to validation/run. GPU is h100 or h200 from nvidia-smi.
# Every process compiles with its own cold Inductor cache (a script run twice on the machine would
# otherwise load its autotuned kernel configs and skip the timing and its memory, which the twin counts).
#   PLAN=../../plan.txt CONV=conv_problems_blind340.json bash validation/run/gpu_call.sh
set -u
cd "$(dirname "$0")"
R=/tmp/res; rm -rf $R; mkdir -p $R/probes $R/hist
name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); echo "$name" > $R/gpu.txt
case "$name" in *H200*) g=h200 ;; *) g=h100 ;; esac
t0=$(date +%s)
C=$(mktemp -d); export INDUCTOR_CACHE_ROOT=$C/truth
stamp() { echo "$1 $(( $(date +%s) - t0 ))s" >> $R/times.txt; }
[ -z "${PLAN:-}" ] || ( INDUCTOR_CACHE_ROOT=$C/lanes DEADLINE=${DEADLINE:-200} bash record_lanes.sh $R/lanes "$PLAN" > $R/lanes.log 2>&1; stamp lanes ) &
[ -z "${CONV:-}" ] || (
    for w in 0 1; do
        timeout $(( ${CSSEC:-150} + 20 )) python3 conv_sweep.py run "$CONV" $R/cs.w$w ${CSSEC:-150} $w 2 > $R/cs$w.log 2>&1 &
    done
    wait; stamp sweep ) &
# shellcheck disable=SC2086  # the names hold no spaces
[ -z "${TRUTH:-}" ] || ( OPS_TRUTH_ALL=1 NO_MEMTRACKER=1 TRUTH_JOBS=${TRUTH_JOBS:-2} timeout ${TSEC:-260} \
    bash truth.sh $R/tr $TRUTH > $R/truth.log 2>&1; stamp truth ) &
(
    for item in ${PROBES:-}; do
        p=${item%%:*}; arg=""; tag=$p
        [ "$item" = "$p" ] || { arg=$(ls ${item#*:}_*.py | head -1); tag=${p}_$(basename "${item#*:}"); }
        # shellcheck disable=SC2086  # an empty arg is no argument
        TORCHINDUCTOR_CACHE_DIR=$C/probe_$tag timeout 90 python3 probes/$p.py $arg > $R/probes/${tag}_$g.out 2> $R/probes/${tag}_$g.err
        echo "$tag rc=$?" >> $R/probes/summary.txt
    done
    for s in ${HIST:-}; do
        n=$(basename "$s"); f=$(ls "${s}"_*.py | head -1)
        TORCHINDUCTOR_CACHE_DIR=$C/hist_$n OUT_PICKLE=$R/hist/history_${n}_$g.pickle CONTEXT=none timeout ${HSEC:-90} python3 history.py "$f" > $R/hist/$n.out 2>&1
        echo "$n rc=$?" >> $R/hist/summary.txt
    done
    stamp probes ) &
wait
[ -z "${BENCH:-}" ] || {
    for w in 0 1 2 3; do
        timeout $(( ${BMSEC:-140} + 20 )) python3 conv_sweep.py run-benchmark "$BENCH" $R/bm.w$w ${BMSEC:-140} $w 4 > $R/bm$w.log 2>&1 &
    done
    wait; stamp bench; }
xz -T0 -6 $R/hist/*.pickle 2>/dev/null
(cd /tmp && tar cJf "$OUT/res.tar.xz" res)
cat $R/times.txt; cat $R/lanes/lanes.txt 2>/dev/null; ls -la "$OUT"
