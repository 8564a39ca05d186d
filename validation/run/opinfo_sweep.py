"""PyTorch's own OpInfo samples on the simulated GPU: every op of `op_db` that the CUDA build supports in
the dtype, each sample input made on "cuda" and on the CPU with the same seed, run both ways; a sample
whose CPU run succeeds and whose simulated run raises, or gives outputs of other shapes or dtypes, is
a finding of the twin (a crash a user's program could hit). Needs `expecttest` (PyTorch's test
utilities import it); run it under the twin, no GPU needed:

    PYTHONPATH=DEPS python -m vramscope run validation/run/opinfo_sweep.py OUT.jsonl [DTYPE] [OP...]

OUT.jsonl gets one line per finding ({"op", "variant", "sample", "kind", "detail"}); the last line
printed is the totals. DTYPE defaults to float32.

With GRAD=1 in the environment it sweeps backward instead: only ops with `supports_autograd`, samples
made with `requires_grad=True`; after the forward, the floating outputs that require grad are each
summed and added, `backward()` runs, and the `.grad` (None, or shape and dtype) of every leaf tensor
of the sample is compared; a backward that raises on the simulated GPU only is kind "grad_raised", other
grads "grad_mismatch" (a sample whose CPU backward raises, or whose outputs need no grad, is not counted).
"""

import json
import os
import sys
import traceback
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils._pytree import tree_flatten

out_path = sys.argv[1]
dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.float32
only = set(sys.argv[3:])
grad = os.environ.get("GRAD") == "1"
warnings.simplefilter("ignore")


def samples(op, device):
    torch.manual_seed(0)
    return list(op.sample_inputs(device, dtype, requires_grad=grad))


def leaves(sample):
    flat, _ = tree_flatten((sample.input, sample.args, sample.kwargs))
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]


def backward(result, sample):
    """The sample's leaf grads after backward of its outputs' sum; None where no output needs grad."""
    outs, _ = tree_flatten(result)
    outs = [t for t in outs if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    if not outs:
        return None
    loss = outs[0].sum()
    for t in outs[1:]:
        loss = loss + t.sum()
    loss.backward()
    return [None if t.grad is None else (tuple(t.grad.shape), str(t.grad.dtype)) for t in leaves(sample)]


def shapes(result):
    leaves, _ = tree_flatten(result)
    return [
        (tuple(t.shape), str(t.dtype)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in leaves
    ]


def run(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


totals = {"ops": 0, "samples": 0, "raised": 0, "mismatch": 0, "skipped": 0}
if grad:
    totals.update({"backward": 0, "grad_raised": 0, "grad_mismatch": 0})
with open(out_path, "w") as out:
    for op in op_db:
        if only and op.name not in only:
            continue
        if not op.supports_dtype(dtype, "cuda"):
            continue
        if grad and not (op.supports_autograd and op.supports_dtype(dtype, "cpu")):
            continue
        totals["ops"] += 1
        print(f"opinfo_sweep: {op.name} {op.variant_test_name}", file=sys.stderr, flush=True)
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
                cpu_result = run(op, c)
                expected = shapes(cpu_result)
            except Exception:
                continue
            cpu_grads = None
            if grad:
                try:
                    cpu_grads = backward(cpu_result, c)
                except Exception:
                    cpu_grads = None
            totals["samples"] += 1
            finding = None
            stage = "forward"
            try:
                gpu_result = run(op, g)
                got = shapes(gpu_result)
                if got != expected:
                    finding = ("mismatch", f"cpu {expected} cuda {got}")
                elif cpu_grads is not None:
                    totals["backward"] += 1
                    stage = "backward"
                    got_grads = backward(gpu_result, g)
                    if got_grads != cpu_grads:
                        finding = ("grad_mismatch", f"cpu {cpu_grads} cuda {got_grads}")
            except Exception as e:
                tb = traceback.extract_tb(e.__traceback__)
                where = next(
                    (f"{f.filename}:{f.lineno}" for f in reversed(tb) if "vramscope" in f.filename), ""
                )
                kind = "grad_raised" if stage == "backward" else "raised"
                finding = (kind, f"{type(e).__name__}: {str(e)[:400]} @ {where}")
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
