#!/bin/bash
# The first kernels' driver mappings and forward0's segments among them, over the 25 op-by-op runs of
# fixtures/va_maps (mlog.tar.xz 8, ops2.tar.xz 12, maps.tar.xz's ops/ 5):
#   bash validation/va_pool/run_all.sh [OUTDIR]     (default /tmp/va_pool_out)
# unpacks the archives into $VA_POOL_DATA (default /tmp/va_pool_data) and writes each script's
# report to OUTDIR (README.md says what each shows).
set -e
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-/tmp/va_pool_out}"
export VA_POOL_DATA="${VA_POOL_DATA:-/tmp/va_pool_data}"
mkdir -p "$out"
for a in mlog ops2 maps; do mkdir -p "$VA_POOL_DATA/$a" && tar xJf "$root/fixtures/va_maps/$a.tar.xz" -C "$VA_POOL_DATA/$a"; done
cd "$here"
python3 firstop.py > "$out/firstop.txt"        # the first op's mlog M/U lines and maps changes, every run
python3 q1.py       > "$out/q1_pool.txt"        # the 512 MiB pool
python3 q2.py v     > "$out/q2_pinned.txt"      # the pinned 8.25 MiB
python3 q3_list.py  > "$out/q3_list.txt"        # forward0's segments inside the pool
python3 sim.py      > "$out/sim_late.txt"       # forward0 replayed, every variant (visible events late)
EVORDER=early python3 sim.py > "$out/sim_early.txt"
python3 sim.py F    > "$out/sim_F.txt"          # variant F, per run
python3 pin2_holes.py > "$out/pin2.txt"         # the visible 2 MiB pinned mappings of forward0
python3 q4.py       > "$out/q4_cublas.txt"      # the first cuBLAS call
echo "reports in $out"
