"""torchvision raft_small optical flow (feature and context encoders, an all-pairs correlation pyramid
sampled with grid_sample, a convolutional GRU refining the flow 12 times), fp32, AdamW with weight decay,
a sequence loss over every refinement (weights 0.8^k), grad clipping, batch 4 at 368x496, 2 steps."""

import os

import torch
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1805)
BATCH, H, W, UPDATES = (1, 128, 128, 2) if SMALL else (4, 368, 496, 12)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.optical_flow.raft_small(weights=None).to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=4e-4, weight_decay=1e-4, eps=1e-8)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    img1 = torch.rand(BATCH, 3, H, W, device=device) * 2 - 1
    img2 = torch.rand(BATCH, 3, H, W, device=device) * 2 - 1
    target = torch.randn(BATCH, 2, H, W, device=device)
    flows = model(img1, img2, num_flow_updates=UPDATES)
    loss = sum(0.8 ** (len(flows) - 1 - k) * (f - target).abs().mean() for k, f in enumerate(flows))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del flows, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
