#!/usr/bin/env bash
# `vramscope run` on benches/llama8b_train_step.py, on one core, against
# `import torch, transformers` alone (what the script costs before it runs), and with
# torch._dynamo, which the script's optimizer imports on any machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
for i in 1 2 3; do
    /usr/bin/time -f "import alone: %e s, %M KiB" taskset -c 0 "$PY" -c "import torch, transformers, transformers.models.llama"
    # the script's own optimizer and checkpointing import torch._dynamo (torch._disable_dynamo) on a GPU too
    /usr/bin/time -f "import with torch._dynamo: %e s, %M KiB" taskset -c 0 "$PY" -c "import torch, transformers, transformers.models.llama, torch._dynamo"
    /usr/bin/time -f "vramscope run: %e s, %M KiB" taskset -c 0 "$PY" -m vramscope run --quiet benches/llama8b_train_step.py
done
