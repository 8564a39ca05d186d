"""A 2-layer bidirectional LSTM with projections (hidden 1,024, proj_size 256) over packed
variable-length sequences (`pack_padded_sequence(enforce_sorted=False)`, lengths 64..512), a
per-frame classifier on the unpacked output, fp32, Adam, batch 32, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7701)
B, T, F_IN, H, P, C = (3, 12, 8, 16, 4, 5) if SMALL else (32, 512, 80, 1024, 256, 48)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(F_IN, H, num_layers=2, bidirectional=True, proj_size=P, batch_first=True)
        self.out = nn.Linear(2 * P, C)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, _ = self.rnn(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return self.out(y)


model = Net().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
lengths = torch.linspace(T // 8, T, B).long()[torch.randperm(B)]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, T, F_IN, device=device)
    y = torch.randint(0, C, (B, T), device=device)
    logits = model(x, lengths)
    loss = F.cross_entropy(logits.reshape(-1, C), y.reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
