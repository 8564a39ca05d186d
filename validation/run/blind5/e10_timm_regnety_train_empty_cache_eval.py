"""timm `regnety_040` (pretrained=False) trained in fp32 with SGD momentum + nesterov at batch 128 x 224,
3 steps; then the optimizer and gradients are dropped (`del`, `gc.collect()`, `torch.cuda.empty_cache()`),
the model is evaluated under `torch.no_grad()` at batch 256 in fp16 autocast with softmax top-5 moved to the
host, and `empty_cache()` is called again at the end."""

import gc
import os

import timm
import torch
import torch.nn.functional as F

B, EVAL_B, IMG, CLASSES = (2, 4, 32, 10) if os.environ.get("SMOKE") else (128, 256, 224, 1000)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_dtype = torch.float16 if device == "cuda" else torch.bfloat16
torch.manual_seed(510)


def report(tag):
    if device == "cuda":
        print(
            f"{tag} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = timm.create_model("regnety_040", pretrained=False, num_classes=CLASSES, drop_rate=0.2).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5)
report("model")

model.train()
for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=False)
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.3f}")
    report(f"train {step}")

del optimizer, loss, x, y
model.zero_grad(set_to_none=True)
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
report("after empty_cache")

model.eval()
top5 = []
with torch.no_grad():
    for _ in range(3):
        x = torch.randn(EVAL_B, 3, IMG, IMG, device=device)
        with torch.autocast(device_type=device, dtype=amp_dtype):
            logits = model(x)
        top5.append(logits.float().softmax(dim=-1).topk(5, dim=-1).indices.cpu())
print(f"top5 {torch.cat(top5).shape}")
report("eval")

del x, logits
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()
report("end")
