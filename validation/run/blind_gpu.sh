#!/bin/bash
# One GPU call for blind sets: the recordings, the per-op truth and the memory histories of the named
# scripts, all on one GPU, then one archive of them:
#   bash validation/run/blind_gpu.sh OUT.tgz SCRIPT...      (e.g. validation/run/blind61/bi*.py)
# -> OUT.tgz holding rec/ (record.sh), truth/ops/ (truth.sh with NO_MEMTRACKER=1) and hist/NAME.pickle
#    (history.py; frames on; pickles over 6 MB kept as NAME.pickle.xz, and the largest histories left out
#    while the archive is over 15 MB, as the device hands back files of up to 16 MiB) with their logs.
# record.sh runs one script at a time; the per-op truth (two at once, from the last script back) and the
# histories (from the middle of the list on, then round) run beside it, so one large script seldom runs in
# several lanes at once (five copies of a 40 GB script would not fit one GPU): each process reads only
# its own allocator's statistics, so they do not disturb one another.
# BUDGET_S (default 3000) bounds each lane's seconds; what finished by then is archived. WRAPPERS=FILE.tgz
# also keeps the record lane's Inductor wrappers.
set -u
budget="${BUDGET_S:-3000}"
archive="${1:?usage: blind_gpu.sh OUT.tgz SCRIPT...}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
# Each process compiles with its own cold Inductor cache (the lanes run the same scripts at once, and a
# Triton kernel's autotuned config cached by one would skip the timing, and its memory, in another; the
# twin takes the cache cold): caches/LANE/NAME, outside the archive.
caches="$(mktemp -d)"
names=()
for f in "$@"; do names=("$(basename "$f" .py)" "${names[@]}"); done
half=$(( $# / 2 ))
rotated=("${@:half+1}" "${@:1:half}")
INDUCTOR_CACHE_ROOT="$caches/rec" timeout "$budget" bash "$here/record.sh" "$work/rec" "$@" > "$work/record.log" 2>&1 &
INDUCTOR_CACHE_ROOT="$caches/ops" NO_MEMTRACKER=1 TRUTH_JOBS=2 timeout "$budget" bash "$here/truth.sh" "$work/truth" "${names[@]}" > "$work/truth.log" 2>&1 &
work="$work" here="$here" caches="$caches" timeout "$budget" bash -c '
  mkdir -p "$work/hist"
  export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error HF_HUB_OFFLINE=1
  for f in "$@"; do
    n="$(basename "$f" .py)"
    TORCHINDUCTOR_CACHE_DIR="$caches/hist/$n" OUT_PICKLE="$work/hist/$n.pickle" timeout -k 5 240 python3 "$here/history.py" "$f" > "$work/hist/$n.out" 2>&1
  done
' _ "${rotated[@]}" &
wait
find "$work/hist" -name '*.pickle' -size +6M -exec xz -T0 -6 {} \;
tar czf "$archive" -C "$work" .
while [ "$(stat -c %s "$archive")" -gt 15000000 ]; do
  big="$(ls -S "$work"/hist/*.pickle* 2>/dev/null | head -1)"
  [ -n "$big" ] || break
  echo "blind_gpu.sh: $(basename "$big") left out (archive over 15 MB)" >> "$work/hist/dropped.txt"
  rm -f "$big"
  tar czf "$archive" -C "$work" .
done
if [ -n "${WRAPPERS:-}" ]; then
  # WRAPPERS=FILE.tgz: the record lane's generated wrappers (Inductor's output code, the files holding
  # `def call(self, args)`), under each script's name, for validation/run/compile/wrappers_diff.py
  (cd "$caches/rec" 2>/dev/null && grep -rl --include='*.py' 'def call(self, args)' . | tar czf "$WRAPPERS" -T -) || true
fi
rm -rf "$work" "$caches"
