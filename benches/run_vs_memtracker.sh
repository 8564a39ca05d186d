#!/usr/bin/env bash
# On the GPU machine, one core each: `import torch, transformers` alone, `vramscope run` on
# benches/llama8b_train_step.py, and PyTorch's MemTracker over FakeTensorMode on the same script
# (validation/run/memtracker.py), so both tools' times come from one machine.
#   bash benches/run_vs_memtracker.sh > OUT.txt        (NO_MEMTRACKER=1: the first two only)
# BASE=DIR also times, in each round, `vramscope run` with the package under DIR first on PYTHONPATH
# (another build of vramscope, side by side with the one the environment imports). MemTracker runs
# in each round, after `vramscope run`, so that each ratio comes from neighbouring runs. Each
# timing prints wall seconds (the figure compared), then the process's user and sys CPU; each
# round starts with /proc/loadavg and /proc/stat's cpu line (its 8th figure is the steal), which
# show whether the machine was quiet.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-python3}"
TIMEFORMAT='%R s (user %U, sys %S)'
# Bytecode as any `pip install` leaves it: a machine that sets PYTHONDONTWRITEBYTECODE and ships
# no __pycache__ (the GPU machine does) compiles every module from source in every process, which
# costs both tools seconds that no user pays. Cache it once under PYCACHE, warmed by one run of each.
if [ -z "${NO_PYCACHE:-}" ]; then
    unset PYTHONDONTWRITEBYTECODE
    export PYTHONPYCACHEPREFIX="${PYCACHE:-/tmp/vramscope-bench-pyc}"
    echo "bytecode cache: $PYTHONPYCACHEPREFIX (warming)"
    "$PY" -m vramscope run --quiet benches/llama8b_train_step.py >/dev/null 2>&1
    [ -z "${BASE:-}" ] || PYTHONPATH="$BASE" "$PY" -m vramscope run --quiet benches/llama8b_train_step.py >/dev/null 2>&1
    [ -n "${NO_MEMTRACKER:-}" ] || "$PY" validation/run/memtracker.py benches/llama8b_train_step.py >/dev/null 2>&1
fi
# The optional libraries that the script's imports load on this machine (transformers imports
# scikit-learn's `sklearn.metrics`, scipy's `scipy.optimize`, torchaudio, torchvision, accelerate
# where they are installed), each with its cumulative import time in microseconds (-X importtime)
echo "optional libraries the script's imports load (-X importtime, cumulative us):"
taskset -c 0 "$PY" -X importtime -c 'import torch, torch._dynamo; from transformers import LlamaConfig, LlamaForCausalLM' 2>&1 >/dev/null \
    | awk -F'|' '$3 ~ /^ *(sklearn|sklearn\.metrics|scipy|scipy\.optimize|pandas|torchaudio|torchvision|accelerate|peft|PIL|jinja2)$/ {gsub(/ /, "", $3); gsub(/ /, "", $2); print "  " $3 " " $2}'
# what `import transformers` spends reading every installed distribution's files
# (`importlib.metadata.packages_distributions()`, transformers/utils/import_utils.py's
# PACKAGE_DISTRIBUTION_MAPPING): the baseline pays it too, and it grows with the packages installed
echo "packages_distributions: $(taskset -c 0 "$PY" -c 'import time, importlib.metadata as m; t = time.perf_counter(); n = len(m.packages_distributions()); print(f"{time.perf_counter() - t:.3f} s, {n} names")' 2>&1)"
# `vramscope run`'s one call into the CUDA runtime (`_hide_real_gpus`: cudaGetDeviceCount with
# CUDA_VISIBLE_DEVICES="", which loads the driver and runs cuInit where there is one)
echo "_hide_real_gpus: $(taskset -c 0 "$PY" -c 'import time, torch; from vramscope._run import _hide_real_gpus; t = time.perf_counter(); _hide_real_gpus(); print(f"{time.perf_counter() - t:.3f} s")' 2>&1)"
for i in $(seq "${ROUNDS:-3}"); do
    echo "round $i: load $(cut -d' ' -f1-3 /proc/loadavg); $(head -1 /proc/stat)"
    echo "import alone: $( { time taskset -c 0 "$PY" -c 'import torch, transformers, transformers.models.llama' >/dev/null 2>&1; } 2>&1 )"
    echo "import with torch._dynamo: $( { time taskset -c 0 "$PY" -c 'import torch, transformers, transformers.models.llama, torch._dynamo' >/dev/null 2>&1; } 2>&1 )"
    echo "the script's imports (its Llama classes, torch._dynamo): $( { time taskset -c 0 "$PY" -c 'import torch, torch._dynamo; from transformers import LlamaConfig, LlamaForCausalLM' >/dev/null 2>&1; } 2>&1 )"
    # as above, with scikit-learn hidden from the process (`find_spec("sklearn")` is None): the
    # part of the script's imports that `sklearn.metrics` costs on this machine
    echo "the script's imports, scikit-learn hidden: $( { time taskset -c 0 "$PY" -c 'import sys; sys.modules["sklearn"] = None; import torch, torch._dynamo; from transformers import LlamaConfig, LlamaForCausalLM' >/dev/null 2>&1; } 2>&1 )"
    echo "vramscope run: $( { time taskset -c 0 "$PY" -m vramscope run --quiet benches/llama8b_train_step.py >/dev/null 2>&1; } 2>&1 )"
    [ -z "${BASE:-}" ] || echo "vramscope run (BASE=$BASE): $( { time PYTHONPATH="$BASE" taskset -c 0 "$PY" -m vramscope run --quiet benches/llama8b_train_step.py >/dev/null 2>&1; } 2>&1 )"
    [ -n "${NO_MEMTRACKER:-}" ] || echo "memtracker: $( { time taskset -c 0 "$PY" validation/run/memtracker.py benches/llama8b_train_step.py > /tmp/mt.json 2>/dev/null; } 2>&1 ) $(cat /tmp/mt.json)"
done
