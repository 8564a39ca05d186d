#!/usr/bin/env bash
# Where `vramscope run`'s wall time goes on benches/llama8b_train_step.py, on one core: the
# script's imports and the script itself, in one process, with the machine's GPUs visible to the
# process and hidden (a process that may see GPUs pays the autograd engine's device threads).
#   bash benches/run_split.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
for cvd in unset ""; do
    if [ "$cvd" = unset ]; then echo "== GPUs as found"; else echo "== CUDA_VISIBLE_DEVICES=\"\" (none)"; fi
    ( [ "$cvd" = unset ] || export CUDA_VISIBLE_DEVICES="$cvd"
      taskset -c 0 "$PY" - <<'PY'
import runpy, time
t0 = time.perf_counter()
import torch, torch._dynamo  # noqa: E401
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401
import vramscope
t1 = time.perf_counter()
with vramscope.capture(gpu="h100"):
    t2 = time.perf_counter()
    runpy.run_path("benches/llama8b_train_step.py")
    t3 = time.perf_counter()
print(f"imports {t1 - t0:.3f} s, script {t3 - t2:.3f} s")
PY
    )
done
