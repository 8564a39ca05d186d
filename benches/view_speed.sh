#!/usr/bin/env bash
# `vramscope view` at 10 M trace entries in headless Chromium (issue #36):
# makes a real-shaped wrapped snapshot of ENTRIES entries with the synthetic
# generator (about 1.44 GB for 10 M), then times first paint, hover, wheel
# zoom, drag zoom, pan, a click, search and an OOM jump by the page's own
# clock (benches/view_browser.py: one JSON line a page load). Needs
# /usr/bin/chromium. Figures go to docs/inspect-speed.md.
#
#   bash benches/view_speed.sh [DIR] [RUNS]
#
# ENTRIES (default 10000000), QUERY (default train.py), BIN (default
# target/release/vramscope) and PY (default python3) override.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/vramscope-view-speed}
RUNS=${2:-5}
ENTRIES=${ENTRIES:-10000000}
BIN=${BIN:-target/release/vramscope}
PY=${PY:-python3}
mkdir -p "$DIR"
cargo build --release -q -p vramscope --bin vramscope -p vramscope-snapshot --example gen_snapshot
f="$DIR/s$ENTRIES.pickle"
if [ ! -s "$f" ]; then
    target/release/examples/gen_snapshot --entries "$ENTRIES" --max-entries "$ENTRIES" \
        --streams 3 --conf expandable_segments:True --out "$f"
fi
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $(stat -c %s "$f") bytes"
cat "$f" >/dev/null # warm the page cache
"$PY" benches/view_browser.py "$BIN" "$f" "$RUNS" "${QUERY:-train.py}"
