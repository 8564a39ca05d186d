"""GPU probe for blind263/jd04's unexplained misses (session 57; not run yet). The twin compiles the same
12 graphs as the H200 (Inductor's wrappers match line for line up to comments and kernel names), so the
misses come from the eager code: phase 3 (Decoder.forward is skipped after its `is_causal=t > 1` graph
break, the Layer frames compiled) keeps 14,135,808 bytes more in the H200's caches at the end (block
remainders left unsplit?), and phase 4 (Layer.forward past recompile_limit 8 runs eagerly at cache
lengths 68..75: cuDNN SDPA, q 8x16x1x64, k/v 8x16xLx64 bf16, no mask) peaks 97,571,840 above the twin.

Run: python validation/run/probes/jd04_phase4_probe_s57.py OUTDIR
Writes OUTDIR/jd04_probe.pickle (memory history) and prints, per case, the peak above the start and the
allocations the cuDNN call makes (its workspace: MHA.cpp `get_workspace_size`)."""

import os
import pickle
import sys

import torch
import torch.nn.functional as F

out = sys.argv[1] if len(sys.argv) > 1 else "."
torch.cuda.memory._record_memory_history(max_entries=200000)
B, H, hd = 8, 16, 64
q = torch.randn(B, H, 1, hd, device="cuda", dtype=torch.bfloat16)
for backend in ("cudnn", "efficient", "default"):
    for L in range(64, 77):
        k = torch.randn(B, H, L, hd, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        segs = torch.cuda.memory_stats()["segment.all.allocated"]
        with torch.no_grad():
            if backend == "default":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=False)
            else:
                kind = {
                    "cudnn": torch.nn.attention.SDPBackend.CUDNN_ATTENTION,
                    "efficient": torch.nn.attention.SDPBackend.EFFICIENT_ATTENTION,
                }[backend]
                with torch.nn.attention.sdpa_kernel(kind):
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        torch.cuda.synchronize()
        print(
            f"{backend} L={L}: peak-base {torch.cuda.max_memory_allocated() - base} "
            f"held {torch.cuda.memory_allocated() - base} new segments "
            f"{torch.cuda.memory_stats()['segment.all.allocated'] - segs}",
            flush=True,
        )
        del o, k, v
with open(os.path.join(out, "jd04_probe.pickle"), "wb") as f:
    pickle.dump(torch.cuda.memory._snapshot(), f)
# then the script itself with its history: python validation/record.py-style run of
# validation/run/blind263/jd04_*.py with `torch.cuda.memory._record_memory_history()` at its top gives
# phase 3's cache blocks (sizes vs requested) and phase 4's peak allocation by frame
