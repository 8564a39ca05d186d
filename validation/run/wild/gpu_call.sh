#!/bin/bash
# One device call running the wild sweeps side by side on one GPU, each going on where the committed H200
# summaries (fixtures/run/summary_wild_KIND_h200.jsonl) and this machine's earlier calls stopped:
#   KINDS="torchbench programs lightning" LIMIT=500 bash validation/run/wild/gpu_call.sh
# Each sweep runs under `timeout LIMIT` (default 500 s) with TIMEOUT (default 240 s) a run, from its
# checkout under validation/run/wild/ (carried: see README.md); its outputs go to /tmp/wild/KIND, and
# $OUT/wildTAG.tgz archives them all at the end. lightning's wheels are read from /tmp/site (README.md).
# DONE_DIR (default fixtures/run) holds the committed summaries, for a call whose tree leaves fixtures/
# behind (the 64 MiB limit). PKILL=0 leaves record.py processes of other lanes alone when the sweeps stop.
export PYTHONUNBUFFERED=1
W=validation/run/wild
O=/tmp/wild
mkdir -p "$O"
go() { # KIND RUNNER CHECKOUT
  [ -d "$3" ] || { echo "$1: no checkout at $3"; return; }
  rest=$(python3 "$W/resume.py" "$1" "${DONE_DIR:-fixtures/run}/summary_wild_$1_h200.jsonl" "$O/$1/summary.jsonl")
  [ -n "$rest" ] || { echo "$1: every entry run"; return; }
  [ -f "$O/$1/summary.jsonl" ] && export NO_FAKE_DATA=1
  # shellcheck disable=SC2086  # the names are one word each
  TIMEOUT=${TIMEOUT:-240} timeout -k 5 "${LIMIT:-500}" python3 "$W/$2" gpu "$3" "$O/$1" $rest >> "$O/$1.log" 2>&1
}
for k in ${KINDS:-examples programs torchbench tutorials lightning}; do
  case $k in
    examples) go examples sweep.py "$W/examples" & ;;
    programs) go programs programs.py "$W/programs" & ;;
    torchbench) go torchbench torchbench.py "$W/torchbench" & ;;
    tutorials) go tutorials tutorials.py "$W/tutorials" & ;;
    lightning) (export PYTHONPATH=/tmp/site; go lightning lightning.py "$W/lightning") & ;;
    *) echo "gpu_call.sh: unknown sweep $k" ;;
  esac
done
wait
if [ "${PKILL:-1}" = 1 ]; then pkill -f validation/run/record.py; pkill -f torchrun; sleep 2; fi
for k in ${KINDS:-examples programs torchbench tutorials lightning}; do
  left=$(python3 "$W/resume.py" "$k" "${DONE_DIR:-fixtures/run}/summary_wild_${k}_h200.jsonl" "$O/$k/summary.jsonl" | wc -w)
  echo "$k: $(cat "$O/$k/summary.jsonl" 2>/dev/null | wc -l) run in this machine's calls; left: $left"
done
tar czf "$OUT/wild${TAG:-}.tgz" -C "$O" .
