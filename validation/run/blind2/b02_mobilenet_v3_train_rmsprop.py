"""torchvision mobilenet_v3_large fp32 training at batch 160, RMSprop (momentum), clip_grad_norm_,
then eval."""

import os

import torch
import torch.nn.functional as F
import torchvision

B, IMG, STEPS = (4, 64, 2) if os.environ.get("SMOKE") else (160, 224, 4)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(3)

model = torchvision.models.mobilenet_v3_large(num_classes=200, dropout=0.2).to(device)
optimizer = torch.optim.RMSprop(
    model.parameters(), lr=0.016, alpha=0.9, eps=0.0316, momentum=0.9, weight_decay=1e-5
)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, IMG, IMG, device=device)
    y = torch.randint(0, 200, (B,), device=device)
    logits = model(x)
    loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=2.0)
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    print(f"loss {loss.item():.4f} grad_norm {grad_norm.item():.3f}")

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x = torch.randn(B * 2, 3, IMG, IMG, device=device)
        y = torch.randint(0, 200, (B * 2,), device=device)
        correct += (model(x).argmax(dim=1) == y).sum().item()
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
print(f"eval correct {correct}")
