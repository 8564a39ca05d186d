"""timm deit_tiny_distilled_patch16_224 (random weights) trained in fp32 against a frozen teacher
(timm resnet18 under no_grad): cross-entropy on the class head plus KL divergence between the
distillation head and the teacher's softened logits, AdamW, batch 64, 3 steps; 4 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2503)
B, R = (2, 224) if SMALL else (64, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
student = timm.create_model("deit_tiny_distilled_patch16_224", pretrained=False, num_classes=100).to(device)
student.set_distilled_training(True)  # the class and distillation heads apart, as in DeiT's training
teacher = timm.create_model("resnet18", pretrained=False, num_classes=100).to(device).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
optimizer = torch.optim.AdamW(student.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(B, 3, R, R, device=device)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.no_grad():
        soft = F.log_softmax(teacher(x) / 3.0, dim=-1)
    cls, dist = student(x)
    loss = F.cross_entropy(cls, y) + F.kl_div(
        F.log_softmax(dist / 3.0, dim=-1), soft, reduction="batchmean", log_target=True
    )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
