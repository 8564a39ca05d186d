"""torchvision ViT-B/16 trained in bf16 weights with its 12 encoder blocks run through
`torch.utils.checkpoint.checkpoint_sequential` in 4 segments (non-reentrant), AdamW, batch 64 at
224x224, 2 steps; 3 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint_sequential

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7802)
B = 2 if SMALL else 64
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torchvision.models.vit_b_16(num_classes=1000).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)


def forward(x):
    x = model._process_input(x)
    cls = model.class_token.expand(x.shape[0], -1, -1)
    x = torch.cat([cls, x], dim=1) + model.encoder.pos_embedding
    x = checkpoint_sequential(model.encoder.layers, 4, x, use_reentrant=False)
    x = model.encoder.ln(x)
    return model.heads(x[:, 0])


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 3, 224, 224, device=device, dtype=torch.bfloat16)
    y = torch.randint(0, 1000, (B,), device=device)
    loss = F.cross_entropy(forward(x).float(), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
