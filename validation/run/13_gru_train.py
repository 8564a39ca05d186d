"""Bidirectional GRU sequence classifier (cuDNN RNN) on packed variable-length sequences, AdamW."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence

B, T, FEAT, HID = (3, 10, 8, 16) if os.environ.get("SMOKE") else (64, 200, 80, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(FEAT, HID, num_layers=3, batch_first=True, bidirectional=True, dropout=0.1)
        self.fc = nn.Linear(2 * HID, 12)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        last = torch.cat([h_n[-2], h_n[-1]], dim=1)
        return self.fc(last)


model = GRUClassifier().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randn(B, T, FEAT, device=device)
    lengths = torch.randint(T // 2, T + 1, (B,))
    lengths[0] = T
    y = torch.randint(0, 12, (B,), device=device)
    loss = F.cross_entropy(model(x, lengths), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
