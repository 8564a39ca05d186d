#!/bin/bash
# Record every estimate workload (validation/hf_cases.json) and every plan bisection
# (validation/plan_cases.json) on a real GPU, one fresh process per case or try:
#   bash validation/hf_cases.sh OUTDIR [estimate|plan|all]
#   CASES=validation/unseen/shapes_and_settings.json PLAN_CASES=validation/unseen/shapes_and_settings_plan.json \
#     bash validation/hf_cases.sh OUTDIR all        # other case lists (workloads never fitted to)
#   -> OUTDIR/hf_h100.tgz (NAME.json + NAME.trace.json per case), OUTDIR/plan_h100.jsonl
#      (+ OUTDIR/plan/NAME.plan.json and NAME.err per bisection)
# then unpack the figures into fixtures/estimate/ and fixtures/plan/ (see their README.md).
set -u
out="${1:-hf_out}"; what="${2:-all}"
here="$(cd "$(dirname "$0")" && pwd)"
cases="$(realpath "${CASES:-$here/hf_cases.json}")"
plans="$(realpath "${PLAN_CASES:-$here/plan_cases.json}")"
export CASES="$cases"
mkdir -p "$out/work" "$out/plan"
export OMP_NUM_THREADS=2 TOKENIZERS_PARALLELISM=false TRANSFORMERS_VERBOSITY=error
if [ "$what" != plan ]; then
  python3 -c "import json;print('\n'.join(c['name'] for c in json.load(open('$cases'))))" \
    | xargs -P "${JOBS:-8}" -I{} sh -c "python3 '$here/hf_cases.py' '$cases' {} '$out/work' 2> '$out/work/{}.err'"
  (cd "$out/work" && tar czf ../hf_h100.tgz *.json *.err)
fi
if [ "$what" != estimate ]; then
  # plan: one bisection per case of plan_cases.json (PLAN_ONLY="a b" runs a subset), all at once by
  # default: the limits sum to ~31 GiB (+ a CUDA context per process), well inside an 80 GB H100.
  names="${PLAN_ONLY:-$(python3 -c "import json;print('\n'.join(p.get('name', p['case']) for p in json.load(open('$plans'))))")}"
  printf '%s\n' $names \
    | xargs -P "${PLAN_JOBS:-10}" -I{} sh -c "python3 '$here/plan_bisect.py' '$plans' {} '$out/plan' 2> '$out/plan/{}.err'"
  plan_rc=$?
  # one line per workload, in plan_cases.json's order (every NAME.plan.json found, partial ones too)
  python3 -c "import json,os;[print(json.dumps(json.load(open(f)))) for f in ['$out/plan/'+(p.get('name', p['case']))+'.plan.json' for p in json.load(open('$plans'))] if os.path.exists(f)]" > "$out/plan_h100.jsonl"
  tail -n 3 "$out"/plan/*.err > "$out/plan_errs.txt" 2>/dev/null
  [ "$plan_rc" = 0 ] || { echo "some bisection failed (xargs rc=$plan_rc): see $out/plan_errs.txt" >&2; exit 1; }
fi
