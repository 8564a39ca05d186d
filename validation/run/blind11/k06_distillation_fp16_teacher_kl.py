"""Knowledge distillation: a wide fp16 teacher MLP-mixer-like network in eval under torch.no_grad and a
narrow fp32 student, F.kl_div(log_softmax(student/T), log_softmax(teacher/T), log_target=True) * T^2 plus
cross-entropy, SGD with momentum, batch 256 of 196 tokens x 256 features, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
BATCH, TOKENS, FEATS, CLASSES = (4, 8, 16, 10) if SMALL else (256, 196, 256, 1000)
T = 4.0
torch.manual_seed(1106)
device = "cuda" if torch.cuda.is_available() else "cpu"


def net(width, depth):
    layers = [nn.Linear(FEATS, width)]
    for _ in range(depth):
        layers += [nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width)]
    return nn.Sequential(*layers)


class Model(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.body = net(width, depth)
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x):
        return self.head(self.body(x).mean(dim=1))


teacher = Model(1024, 6).to(device).half().eval()
student = Model(256, 4).to(device)
optimizer = torch.optim.SGD(student.parameters(), lr=0.05, momentum=0.9)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x = torch.randn(BATCH, TOKENS, FEATS, device=device)
    y = torch.randint(0, CLASSES, (BATCH,), device=device)
    with torch.no_grad():
        t_logits = teacher(x.half() if device == "cuda" else x.to(teacher.head.weight.dtype)).float()
    s_logits = student(x)
    kd = F.kl_div(F.log_softmax(s_logits / T, dim=-1), F.log_softmax(t_logits / T, dim=-1), reduction="batchmean",
                  log_target=True)
    loss = kd * T * T + F.cross_entropy(s_logits, y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
