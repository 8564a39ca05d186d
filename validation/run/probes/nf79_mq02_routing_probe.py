"""blind352/mq02's routing on the GPU (helper nf, session 79): LongCat-Flash's MoE sizes its per-expert
tensors by the tokens each expert got (transformers 5.17 modeling_longcat_flash.py LongcatFlashExperts:
`torch.where(expert_mask[expert_idx])`, one `hidden_states[token_idx]` and, for the 16 real experts,
gate_up / act / down of that many rows; the 8 zero-computation experts an identity of as many rows), and
the twin carries no values of the router's scores, so it spreads the tokens evenly (docs/run.md "Values":
row r takes experts r, r + 1, r + 2, r + 3 modulo 24: 340 to 344 tokens each of 2,048 x 4 choices).

Runs mq02 unchanged (in-process, as `__main__`) with LongcatFlashTopkRouter.get_topk_indices wrapped: each
call's indices are copied to the host (`.cpu()` of a contiguous int64 tensor: a device-to-host copy, no
allocation of the caching allocator), so the script's own memory lines (its `report` prints) stay those of
the plain run; compare them with fixtures/run/run_blind352_h100.jsonl to check that. Prints, per router
call in order, the tokens each of the 24 experts got (16 real, then 8 zero-computation), and at the end
every call's indices (int8, lzma, base64) for the twin to replay:

    python3 probes/nf79_mq02_routing_probe.py        (on the GPU, from validation/run; about 35 s on an H100)
    vramscope run --gpu h100 validation/run/probes/nf79_mq02_routing_replay.py OUT \
        validation/run/blind352/mq02_*.py

(OUT: this probe's stdout.) The replay wrapper writes those indices into the twin's router output, so
every count is the GPU's."""

import base64
import glob
import lzma
import os
import runpy
import sys

import numpy as np
import torch
from transformers.models.longcat_flash import modeling_longcat_flash as M

here = os.path.dirname(os.path.abspath(__file__))
script = sys.argv[1] if len(sys.argv) > 1 else glob.glob(os.path.join(here, "..", "blind352", "mq02_*.py"))[0]
calls = []
orig = M.LongcatFlashTopkRouter.get_topk_indices


@torch.no_grad()
def recorded(self, scores):
    r = orig(self, scores)
    a = r.cpu().numpy()  # device-to-host copy: no caching-allocator allocation
    calls.append(a)
    counts = np.bincount(a.reshape(-1), minlength=self.n_routed_experts)
    print(f"router call {len(calls) - 1} shape {list(a.shape)} counts {counts.tolist()}", flush=True)
    return r


M.LongcatFlashTopkRouter.get_topk_indices = recorded
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
print("router calls", len(calls))
print("shapes", [list(a.shape) for a in calls])
blob = np.concatenate([a.reshape(-1) for a in calls]).astype(np.int8).tobytes()
print("indices_b64", base64.b64encode(lzma.compress(blob)).decode())
s = torch.cuda.memory_stats()
print("end stats", s["allocated_bytes.all.current"], s["reserved_bytes.all.current"], s["num_alloc_retries"])
