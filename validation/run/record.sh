#!/bin/bash
# Record the ground truth of every validation script on a real GPU, one fresh python3 process per
# script, one at a time:
#   bash validation/run/record.sh OUTDIR [NAME...]     (NAMEs, e.g. 07_nanogpt_bf16_fused_adamw, run a subset;
#                                                      a path to a script runs that script, e.g. blind2/b01_*.py)
# -> OUTDIR/env.json              torch/CUDA/GPU/package versions (written first)
#    OUTDIR/NAME.jsonl            record.py's lines: phase0, phase1, ..., end
#    OUTDIR/NAME.out, NAME.err    the script's stdout and stderr
#    OUTDIR/summary.jsonl         one line per script: exit code (124 = timed out), seconds
set -u
out="${1:?usage: record.sh OUTDIR [NAME...]}"
shift
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
unset OUT_JSONL PYTORCH_CUDA_ALLOC_CONF
timeout_s="${TIMEOUT:-120}"

python3 - > "$out/env.json" <<'PY'
import json, platform, sys
from importlib import metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "missing"

env = {"python": sys.version.split()[0], "platform": platform.platform()}
env.update({p: version(p) for p in ("torch", "torchvision", "transformers", "timm", "peft", "accelerate", "numpy")})
try:
    import torch
    env["torch_cuda"] = torch.version.cuda
    env["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env.update(gpu=props.name, total_memory=props.total_memory, capability=list(torch.cuda.get_device_capability(0)),
                   device_count=torch.cuda.device_count(), driver=torch._C._cuda_getDriverVersion() if hasattr(torch._C, "_cuda_getDriverVersion") else None)
    else:
        env["gpu"] = None
except Exception as e:  # keep going: the per-script .err files will say more
    env["error"] = repr(e)
print(json.dumps(env))
PY
cat "$out/env.json"
# Without a GPU the scripts fall back to CPU at full size (the batch finder alone would take 100+ GB of
# host memory): only a smoke run (SMOKE=1, every script's small sizes) is allowed there.
if grep -q '"gpu": null' "$out/env.json" && [ -z "${SMOKE:-}" ]; then
  echo "no CUDA GPU here: run with SMOKE=1 for a CPU smoke test" >&2
  exit 2
fi

if [ $# -gt 0 ]; then
  scripts=()
  for n in "$@"; do
    if [ -f "$n" ]; then scripts+=("$(cd "$(dirname "$n")" && pwd)/$(basename "$n")"); else scripts+=("$here/${n%.py}.py"); fi
  done
else
  scripts=("$here"/[0-9][0-9]_*.py)
fi
: > "$out/summary.jsonl"
for f in "${scripts[@]}"; do
  name="$(basename "$f" .py)"
  rm -f "$out/$name.jsonl"
  start=$(date +%s.%N)
  # INDUCTOR_CACHE_ROOT set: each script compiles with its own cold Inductor cache (no autotuned
  # config of another script or process reused), as the twin takes it
  [ -z "${INDUCTOR_CACHE_ROOT:-}" ] || export TORCHINDUCTOR_CACHE_DIR="$INDUCTOR_CACHE_ROOT/$name"
  OUT_JSONL="$out/$name.jsonl" timeout -k 10 "$timeout_s" python3 "$here/record.py" "$f" \
    > "$out/$name.out" 2> "$out/$name.err"
  rc=$?
  secs=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
  echo "{\"script\": \"$name\", \"rc\": $rc, \"seconds\": $secs}" | tee -a "$out/summary.jsonl"
done
