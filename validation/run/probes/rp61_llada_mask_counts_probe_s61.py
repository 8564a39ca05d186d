"""blind271/jl02's masked-token counts (helper rp, session 61): LLaDA's `forward_process` draws, on the
default CUDA generator seeded 2712, a ratio per sequence (`torch.rand(8)`) then an (8, 2,048) uniform
mask (`torch.rand((b, l)) < p_mask`) for each of the 6 training steps, then three (8, 2,048) masks at
fixed ratios 0.25, 0.5, 0.75 for the evaluation; `logits[masked_indices]` has as many rows as the mask
has True values. The twin computes these draws as the GPU's Philox kernels do (`_philox.py`), so its
counts are jl02's sizes. Run plainly (`python3 rp61_llada_mask_counts_probe_s61.py`) on the GPU; the twin
(`vramscope run --gpu h200`) printed, and the GPU should print the same:
  train 0 ... count 7899, train 1 9238, train 2 8896, train 3 8769, train 4 8191, train 5 10997,
  eval 0.25 count 4143, eval 0.5 8162, eval 0.75 12216 (with the per-sequence counts and ratios: the
  twin's full lines are in fixtures/run/README.md's blind271 entry; the first ratios 0.36103, 0.378654,
  0.906366, 0.509702, 0.155769, 0.339937, 0.763362, 0.411562).
No model: only the generator's draws (jl02 builds its model on the CPU and draws its tokens from a
generator of its own, so the default CUDA generator's offsets are these)."""

import torch

torch.manual_seed(2712)
dev = "cuda"
b, l = 8, 2048  # noqa: E741 (LLaDA's names)
eps = 1e-3
for step in range(6):
    t = torch.rand(b, device=dev)
    p_mask = ((1 - eps) * t + eps)[:, None].repeat(1, l)
    m = torch.rand((b, l), device=dev) < p_mask
    print("train", step, "t", [round(v, 6) for v in t.tolist()], "count", int(m.sum()), m.sum(1).tolist())
for t0 in (0.25, 0.5, 0.75):
    t = torch.full((b,), t0, device=dev)
    p_mask = ((1 - eps) * t + eps)[:, None].repeat(1, l)
    m = torch.rand((b, l), device=dev) < p_mask
    print("eval", t0, "count", int(m.sum()), m.sum(1).tolist())
