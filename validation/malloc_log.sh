#!/bin/bash
# Every host allocation of the first forward, op by op, beside the process's mappings:
#   bash validation/malloc_log.sh OUTDIR LIST
# LIST: lines "CASES.json NAME". For each, validation/va_maps.py runs hf_cases.py stopped after
# every aten op (VA_MAPS_OPS=1) with validation/malloc_log.c preloaded, so that
#   OUTDIR/NAME.mlog       every malloc-family call, free and library mmap of 64 KiB or more,
#                          with the op marks (malloc_log.c says the format)
#   OUTDIR/NAME.maps.json  the mappings at each mark (va_maps.py), NAME.json, NAME.trace.json
# and then OUTDIR.tgz of it all. JOBS (default 4) cases at once.
set -u
out="$(realpath -m "$1")"; list="$2"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
gcc -O2 -Wall -shared -fPIC -o "$out/malloc_log.so" "$here/malloc_log.c" -ldl || exit 2
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
export MLOG_OUT="$out" MLOG_HERE="$here"
grep -v '^\s*$' "$list" | xargs -P "${JOBS:-4}" -L 1 sh -c \
  'python3 "$MLOG_HERE/va_maps.py" "$1" "$2" "$MLOG_OUT" VA_MAPS_OPS=1 LD_PRELOAD="$MLOG_OUT/malloc_log.so" MALLOC_LOG="$MLOG_OUT/$2.mlog" > "$MLOG_OUT/$2.out" 2>&1; echo "$2 rc=$?"' sh
(cd "$(dirname "$out")" && tar czf "$(basename "$out").tgz" --exclude="*.so" "$(basename "$out")")
