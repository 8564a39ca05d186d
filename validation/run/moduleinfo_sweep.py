"""PyTorch's own nn module samples on the simulated GPU: every ModuleInfo of `module_db` whose dtypes
hold DTYPE, each sample of its `module_inputs_func` made on "cuda" and on the CPU with the same seed
(inputs with `requires_grad=True`), the module built from the sample's constructor arguments with the
same seed and moved to the device (as test/test_modules.py does), run in train and in eval mode; then
the floating outputs that require grad are each summed and added and `backward()` runs. A sample whose
CPU run succeeds and whose simulated run raises, or gives outputs, input grads or parameter grads of
other shapes or dtypes (or None against a tensor), is a finding of the twin. Needs `expecttest`; run it
under the twin, no GPU needed:

    PYTHONPATH=DEPS python -m vramscope run validation/run/moduleinfo_sweep.py OUT.jsonl [DTYPE] [MODULE...]

MODULE is a name as `module_db` gives it (`nn.Linear`). OUT.jsonl gets one line per finding
({"module", "training", "sample", "desc", "kind", "detail"}: kind "inputs", "build", "raised",
"mismatch", "grad_raised" or "grad_mismatch"); the last line printed is the totals. DTYPE defaults to
float32.
"""

import json
import sys
import traceback
import warnings

import torch
from torch.testing._internal.common_modules import module_db
from torch.utils._pytree import tree_flatten

out_path = sys.argv[1]
dtype = getattr(torch, sys.argv[2]) if len(sys.argv) > 2 else torch.float32
only = set(sys.argv[3:])
warnings.simplefilter("ignore")


def samples(info, device, training):
    torch.manual_seed(0)
    inputs = info.module_inputs_func(info, device=device, dtype=dtype, requires_grad=True, training=training)
    return [s for s in inputs if s.forward_input is not None]


def shapes(result):
    flat, _ = tree_flatten(result)
    return [(tuple(t.shape), str(t.dtype)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in flat]


def build(info, sample, device, training):
    torch.manual_seed(0)
    args, kwargs = sample.constructor_input.args, sample.constructor_input.kwargs
    m = info.module_cls(*args, **kwargs)
    m.to(device).to(dtype)
    m.train(training)
    return m


def forward(m, sample):
    return m(*sample.forward_input.args, **sample.forward_input.kwargs)


def grad_of(t):
    return None if t.grad is None else (tuple(t.grad.shape), str(t.grad.dtype))


def backward(m, result, sample):
    """The input leaves' and the parameters' grads after backward of the outputs' sum; None where no
    output needs grad."""
    outs, _ = tree_flatten(result)
    outs = [t for t in outs if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
    if not outs:
        return None
    loss = outs[0].sum()
    for t in outs[1:]:
        loss = loss + t.sum()
    loss.backward()
    flat, _ = tree_flatten((sample.forward_input.args, sample.forward_input.kwargs))
    inputs = [grad_of(t) for t in flat if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]
    params = [(name, grad_of(p)) for name, p in m.named_parameters()]
    return {"inputs": inputs, "params": params}


def where(e):
    tb = traceback.extract_tb(e.__traceback__)
    return next((f"{f.filename}:{f.lineno}" for f in reversed(tb) if "vramscope" in f.filename), "")


totals = {"modules": 0, "samples": 0, "backward": 0, "skipped": 0}
kinds = ("inputs", "build", "raised", "mismatch", "grad_raised", "grad_mismatch")
totals.update(dict.fromkeys(kinds, 0))
with open(out_path, "w") as out:

    def finding(info, training, i, desc, kind, detail):
        totals[kind] += 1
        line = {"module": info.name, "training": training, "sample": i, "desc": desc, "kind": kind}
        out.write(json.dumps({**line, "detail": detail[:600]}) + "\n")
        out.flush()

    for info in module_db:
        if only and info.name not in only:
            continue
        if dtype not in info.supported_dtypes("cuda"):
            continue
        totals["modules"] += 1
        print(f"moduleinfo_sweep: {info.name}", file=sys.stderr, flush=True)
        for training in (True, False):
            try:
                cpu_samples, gpu_samples = samples(info, "cpu", training), samples(info, "cuda", training)
            except Exception as e:  # the samples themselves failed to build on one side
                finding(info, training, None, "", "inputs", f"{type(e).__name__}: {e} @ {where(e)}")
                continue
            if len(cpu_samples) != len(gpu_samples):
                totals["skipped"] += 1
                continue
            for i, (c, g) in enumerate(zip(cpu_samples, gpu_samples, strict=True)):
                try:
                    cpu_module = build(info, c, "cpu", training)
                    cpu_result = forward(cpu_module, c)
                    expected = shapes(cpu_result)
                except Exception:
                    continue
                try:
                    cpu_grads = backward(cpu_module, cpu_result, c)
                except Exception:
                    cpu_grads = None
                totals["samples"] += 1
                stage = "build"
                try:
                    gpu_module = build(info, g, "cuda", training)
                    stage = "raised"
                    gpu_result = forward(gpu_module, g)
                    got = shapes(gpu_result)
                    if got != expected:
                        finding(info, training, i, c.desc, "mismatch", f"cpu {expected} cuda {got}")
                        continue
                    if cpu_grads is None:
                        continue
                    totals["backward"] += 1
                    stage = "grad_raised"
                    got_grads = backward(gpu_module, gpu_result, g)
                    if got_grads != cpu_grads:
                        finding(
                            info, training, i, c.desc, "grad_mismatch", f"cpu {cpu_grads} cuda {got_grads}"
                        )
                except Exception as e:
                    finding(
                        info, training, i, c.desc, stage, f"{type(e).__name__}: {str(e)[:400]} @ {where(e)}"
                    )
print(json.dumps(totals))
