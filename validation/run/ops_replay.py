"""Replay the truth archives' per-op records under the twin, op by op, from their arguments alone.

    vramscope run --gpu h200 validation/run/ops_replay.py [OP ...]

Each `truth/ops/*.jsonl` record of `fixtures/run/truth_blind*_h200.tar.xz` (ops that allocated beyond
their outputs on the H200: name, arguments as [sizes, strides, dtype, offset, device], kwargs, count and
requested bytes) is called again as `torch.ops.aten.OP(*args, **kwargs)` on zero-filled tensors of the
same layout, up to 3 distinct calls an op (the named ops only, if any), and the twin's allocation count
and requested bytes around the call are printed beside the GPU's: "OK" or "MISS", or "ERR" where the
call cannot be rebuilt (tensor kwargs, dtype arguments). A MISS is a lead, not a verdict: the replay
has no values (sizes that depend on them differ: nonzero, masked_select, bincount, CTC lengths), no
history (the first cuBLAS call's 32 MiB workspace) and calls the overload packet, below the function
rules of composites (rms_norm, sdpa, lstm, grid_sampler). Session 65, helper au.
"""

import ast
import collections
import glob
import json
import os
import sys
import tarfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ONLY = set(sys.argv[1:])


def records():
    ops = collections.defaultdict(list)
    for path in sorted(
        glob.glob(os.path.join(HERE, "..", "..", "fixtures", "run", "truth_blind*_h200.tar.xz"))
    ):
        with tarfile.open(path) as tar:
            for member in tar:
                if not (member.isfile() and member.name.startswith("truth/ops/")):
                    continue
                script = os.path.basename(member.name)[:4]
                for line in tar.extractfile(member):
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(r, dict):
                        continue
                    op = r.get("op", "")
                    if "args" not in r or "count" not in r or "[" in op or (ONLY and op not in ONLY):
                        continue
                    key = json.dumps(r["args"]) + r["kwargs"]
                    if len(ops[op]) < 3 and all(key != k for k, _, _ in ops[op]):
                        ops[op].append((key, r, script))
    return ops


def build(a):
    if (
        isinstance(a, list)
        and len(a) == 5
        and isinstance(a[0], list)
        and isinstance(a[2], str)
        and a[4] == "cuda"
    ):
        sizes, strides, dtype, offset = a[0], a[1], a[2], a[3]
        n = (
            offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True))
            if all(sizes)
            else offset + 1
        )
        return torch.zeros(n, dtype=getattr(torch, dtype), device="cuda").as_strided(sizes, strides, offset)
    if isinstance(a, list):
        return [build(x) for x in a]
    return a


def stats():
    s = torch.cuda.memory_stats()
    return s["allocation.all.allocated"], s["requested_bytes.all.allocated"]


for op, recs in sorted(records().items()):
    fn = getattr(torch.ops.aten, op, None)
    if fn is None:
        continue
    for _key, r, script in recs:
        try:
            kwargs = ast.literal_eval(r["kwargs"])
            args = [build(a) for a in r["args"]]
            torch.cuda.synchronize()
            c0, q0 = stats()
            out = fn(*args, **kwargs)
            c1, q1 = stats()
            del out
        except Exception as e:
            print("ERR ", op, script, str(e).splitlines()[0][:80], flush=True)
            continue
        twin, gpu = (c1 - c0, q1 - q0), (r["count"], r["requested"])
        verdict = "OK  " if twin == gpu else "MISS"
        print(
            verdict,
            op,
            script,
            "twin",
            twin,
            "gpu",
            gpu,
            json.dumps(r["args"])[:150],
            r["kwargs"][:60],
            flush=True,
        )
        del args
