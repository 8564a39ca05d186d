"""Twin side of nf79_mq02_routing_probe.py (helper nf, session 79): run a LongCat-Flash script (blind352/mq02)
under `vramscope run` with every router call's top-k indices replaced, in call order, by recorded ones, so
each expert's token count (and every size that follows it) is the recorded run's, not the twin's even spread.

    vramscope run --gpu h100 validation/run/probes/nf79_mq02_routing_replay.py ROUTING SCRIPT [ARGS...]

ROUTING: the probe's stdout (its `shapes` and `indices_b64` lines) or an .npz of arrays arr_0, arr_1, ...
(one per call) with `bounds` (its last entry the number of calls). The indices are written into topk's own
output (`copy_` from a host tensor: no allocation on the GPU either), after the original call, so the
router allocates as before. A comparison aid, not a rule: the twin keeps its convention where no
recorded routing is given."""

import base64
import json
import lzma
import runpy
import sys

import numpy as np
import torch
from transformers.models.longcat_flash import modeling_longcat_flash as M


def load(path):
    if path.endswith(".npz"):
        z = np.load(path)
        return [z[f"arr_{i}"] for i in range(int(z["bounds"][-1]))]
    shapes = blob = None
    with open(path) as f:
        for line in f:
            if line.startswith("shapes "):
                shapes = json.loads(line[len("shapes ") :])
            elif line.startswith("indices_b64 "):
                blob = np.frombuffer(lzma.decompress(base64.b64decode(line.split()[1])), dtype=np.int8)
    out, at = [], 0
    for s in shapes:
        n = int(np.prod(s))
        out.append(blob[at : at + n].reshape(s))
        at += n
    assert at == blob.size, (at, blob.size)
    return out


calls = load(sys.argv[1])
state = {"i": 0}
orig = M.LongcatFlashTopkRouter.get_topk_indices


@torch.no_grad()
def replayed(self, scores):
    r = orig(self, scores)
    a = calls[state["i"]]
    state["i"] += 1
    assert tuple(a.shape) == tuple(r.shape), (a.shape, tuple(r.shape))
    r.copy_(torch.from_numpy(a.astype(np.int64)))
    return r


M.LongcatFlashTopkRouter.get_topk_indices = replayed
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
print("router calls replayed", state["i"], "of", len(calls))
