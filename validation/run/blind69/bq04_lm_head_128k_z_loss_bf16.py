"""An LM head over a 128k vocabulary with PaLM's z-loss: bf16 hidden states of 8 x 2,048 tokens, 4,096
wide, through a 128,256-way linear, cross-entropy in fp32 plus 1e-4 * logsumexp(logits)^2, a trainable
final RMSNorm-like scale, Adam on the head, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6904)
V, D, B, L = (100, 32, 2, 8) if SMALL else (128256, 4096, 8, 2048)
device = "cuda" if torch.cuda.is_available() else "cpu"
scale = nn.Parameter(torch.ones(D, device=device, dtype=torch.bfloat16))
head = nn.Linear(D, V, bias=False).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.Adam([scale, *head.parameters()], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    hidden = torch.randn(B, L, D, device=device, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, V, (B, L), device=device)
    h = hidden * torch.rsqrt(hidden.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(hidden.dtype) * scale
    logits = head(h).float()
    z = torch.logsumexp(logits, dim=-1)
    loss = F.cross_entropy(logits.view(-1, V), labels.view(-1)) + 1e-4 * z.pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del hidden, labels, h, logits, z, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
