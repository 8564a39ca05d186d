"""EfficientViT-B1 (MIT Han lab's, timm's efficientvit_b1, pretrained=False: MBConv and fused
stages, then LiteMLA blocks: ReLU linear attention with multi-scale 5 x 5 depthwise aggregation of
q, k, v; the attention products computed in fp32, the model upcasting q, k, v and casting the
result back) at 256 x 256, the whole model cast to bfloat16 (pure bf16 parameters, gradients and
optimizer state, no autocast) in channels_last, trained with create_optimizer_v2(opt="adamp",
lr=1e-3, weight_decay=0.05) (timm's AdamP: Adam with the projection that removes the radial
component of the update for scale-invariant weights, norms and biases without decay); batch 96,
3 steps, each its own phase; then evaluation at 288 x 288 at batch 128 under no_grad,
channels_last, over two batches; 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15705)
B, RES, EB, ERES, NCLS = (4, 64, 4, 96, 10) if SMALL else (96, 256, 128, 288, 1000)
STEPS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16

model = timm.create_model("efficientvit_b1", pretrained=False, num_classes=NCLS)
model = model.to(device=device, dtype=dtype, memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="adamp", lr=1e-3, weight_decay=0.05)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, RES, RES, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    logits = model(x)
    loss = F.cross_entropy(logits.float(), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del x, y, logits, loss
model.eval()
hits = 0
with torch.no_grad():
    for _ in range(2):
        x = torch.randn(EB, 3, ERES, ERES, device=device, dtype=dtype).to(memory_format=torch.channels_last)
        y = torch.randint(0, NCLS, (EB,), device=device)
        hits += (model(x).argmax(-1) == y).sum().item()
if device == "cuda":
    print(
        f"eval 288 acc {hits / (2 * EB):.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
