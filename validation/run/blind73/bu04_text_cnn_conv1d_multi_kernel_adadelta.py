"""Kim's text CNN: a 50k x 300 embedding, Conv1d branches of kernel 3, 4 and 5 with 512 filters each,
max-over-time pooling, dropout and a 20-way classifier, fp32, 256-token sequences at batch 512,
Adadelta, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7304)
V, E, C, B, L = (100, 16, 8, 2, 16) if SMALL else (50000, 300, 512, 512, 256)


class TextCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, E)
        self.convs = nn.ModuleList(nn.Conv1d(E, C, k) for k in (3, 4, 5))
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(3 * C, 20)

    def forward(self, ids):
        x = self.emb(ids).transpose(1, 2)
        pooled = [F.relu(conv(x)).amax(dim=2) for conv in self.convs]
        return self.fc(self.drop(torch.cat(pooled, dim=1)))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = TextCNN().to(device)
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, V, (B, L), device=device)
    y = torch.randint(0, 20, (B,), device=device)
    loss = F.cross_entropy(model(ids), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, y, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
