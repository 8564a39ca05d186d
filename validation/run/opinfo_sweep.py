"""PyTorch's own OpInfo samples on the simulated GPU: every op of `op_db` that the CUDA build supports in
the dtype, each sample input made on "cuda" and on the CPU with the same seed, run both ways; a sample
whose CPU run succeeds and whose simulated run raises, or gives outputs of other shapes or dtypes, is
a finding of the twin (a crash a user's program could hit). Needs `expecttest` (PyTorch's test
utilities import it); run it under the twin, no GPU needed:

    PYTHONPATH=DEPS python -m vramscope run validation/run/opinfo_sweep.py OUT.jsonl [DTYPE] [OP...]

OUT.jsonl gets one line per finding ({"op", "variant", "sample", "kind", "detail"}); the last line
printed is the totals. DTYPE defaults to float32.
"""

import json
import sys
import traceback
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten

out_path = sys.argv[1]
dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.float32
only = set(sys.argv[3:])
warnings.simplefilter("ignore")


def samples(op, device):
    torch.manual_seed(0)
    return list(op.sample_inputs(device, dtype, requires_grad=False))


def shapes(result):
    leaves, _ = tree_flatten(result)
    return [
        (tuple(t.shape), str(t.dtype)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in leaves
    ]


def run(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


totals = {"ops": 0, "samples": 0, "raised": 0, "mismatch": 0, "skipped": 0}
with open(out_path, "w") as out:
    for op in op_db:
        if only and op.name not in only:
            continue
        if not op.supports_dtype(dtype, "cuda"):
            continue
        totals["ops"] += 1
        try:
            cpu_samples, gpu_samples = samples(op, "cpu"), samples(op, "cuda")
        except Exception as e:  # the samples themselves failed to build on one side
            out.write(
                json.dumps(
                    {
                        "op": op.name,
                        "variant": op.variant_test_name,
                        "sample": None,
                        "kind": "samples",
                        "detail": f"{type(e).__name__}: {e}"[:500],
                    }
                )
                + "\n"
            )
            totals["raised"] += 1
            continue
        if len(cpu_samples) != len(gpu_samples):
            totals["skipped"] += 1
            continue
        for i, (c, g) in enumerate(zip(cpu_samples, gpu_samples, strict=True)):
            if shapes((c.input, c.args, c.kwargs)) != shapes((g.input, g.args, g.kwargs)):
                totals["skipped"] += 1
                continue
            try:
                expected = shapes(run(op, c))
            except Exception:
                continue
            totals["samples"] += 1
            finding = None
            try:
                got = shapes(run(op, g))
                if got != expected:
                    finding = ("mismatch", f"cpu {expected} cuda {got}")
            except Exception as e:
                tb = traceback.extract_tb(e.__traceback__)
                where = next(
                    (f"{f.filename}:{f.lineno}" for f in reversed(tb) if "vramscope" in f.filename), ""
                )
                finding = ("raised", f"{type(e).__name__}: {str(e)[:400]} @ {where}")
            if finding:
                totals[finding[0]] += 1
                out.write(
                    json.dumps(
                        {
                            "op": op.name,
                            "variant": op.variant_test_name,
                            "sample": i,
                            "kind": finding[0],
                            "detail": finding[1],
                        }
                    )
                    + "\n"
                )
                out.flush()
print(json.dumps(totals))
