"""The loop the model-zoo sweeps share (`hf_zoo_sweep.py`, `vision_zoo_sweep.py`): for each named model,
build it and run it on the CPU, then on the simulated GPU forward and backward; a model whose CPU run
succeeds and whose simulated run raises, or gives outputs of other shapes or dtypes, is a finding.

A sweep script calls `sweep(NAMES, build, out_path)`, where `build(name)` returns `(model, inputs)` on
the CPU (inputs a dict of keyword arguments, or a tuple of positional ones). OUT.jsonl gets one line per
model ({"model", "stage", "detail"}: stage "cuda" or "mismatch" for findings, "build"/"inputs"/"cpu"
where the CPU side could not run it and the model was left out); the last line printed is the totals.
`python SWEEP.py --list` prints the names (`zoo_sweep.sh` runs them in chunks).
"""

import json
import sys
import traceback

import torch
from torch.utils._pytree import tree_flatten


def shapes(result):
    """The shapes and dtypes of every tensor in a model's output."""
    if hasattr(result, "to_tuple"):
        result = result.to_tuple()
    leaves, _ = tree_flatten(result)
    return [(tuple(t.shape), str(t.dtype)) for t in leaves if isinstance(t, torch.Tensor)]


def to(tree, device):
    """A tree of inputs with its tensors moved to `device`."""
    leaves, spec = tree_flatten(tree)
    return spec.unflatten([x.to(device) if isinstance(x, torch.Tensor) else x for x in leaves])


def _call(model, inputs):
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)


def sweep(names, build, out_path, tag="zoo_sweep"):
    """Run every model of `names` on both sides (`build(name)` -> (model, inputs), on the CPU)."""
    if sys.argv[1:2] == ["--list"]:
        print("\n".join(names))
        return
    totals = {"models": 0, "ran": 0, "cuda": 0, "mismatch": 0, "left_out": 0}
    with open(out_path, "w") as out:

        def note(name, stage, detail):
            out.write(json.dumps({"model": name, "stage": stage, "detail": detail[:600]}) + "\n")
            out.flush()

        for name in names:
            totals["models"] += 1
            print(f"{tag}: {name}", flush=True)
            stage = "build"
            try:
                torch.manual_seed(0)
                model, inputs = build(name)
                model.train()
                stage = "cpu"
                with torch.no_grad():
                    expected = shapes(_call(model, inputs))
            except BaseException as e:  # a model that cannot run on the CPU is left out
                totals["left_out"] += 1
                note(name, stage, f"{type(e).__name__}: {str(e)[:300]}")
                continue
            totals["ran"] += 1
            try:
                model = model.to("cuda")
                result = _call(model, to(inputs, "cuda"))
                got = shapes(result)
                leaves = tree_flatten(result.to_tuple() if hasattr(result, "to_tuple") else result)[0]
                floats = [t for t in leaves if isinstance(t, torch.Tensor)]
                loss = sum(t.float().sum() for t in floats if t.is_floating_point() and t.requires_grad)
                if isinstance(loss, torch.Tensor):
                    loss.backward()
                if got != expected:
                    totals["mismatch"] += 1
                    note(name, "mismatch", f"cpu {expected} cuda {got}")
            except BaseException as e:
                totals["cuda"] += 1
                tb = traceback.extract_tb(e.__traceback__)
                where = next(
                    (f"{f.filename}:{f.lineno}" for f in reversed(tb) if "vramscope" in f.filename), ""
                )
                note(name, "cuda", f"{type(e).__name__}: {str(e)[:400]} @ {where}")
            del model
    print(json.dumps(totals))
