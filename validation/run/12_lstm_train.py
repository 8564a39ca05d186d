"""2-layer LSTM language model (cuDNN RNN) trained with truncated BPTT, hidden state carried and
detached between steps, gradient clipping, Adam."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, VOCAB, EMB, HID = (2, 8, 50, 16, 32) if os.environ.get("SMOKE") else (32, 128, 10000, 256, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)


class LSTMLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMB)
        self.lstm = nn.LSTM(EMB, HID, num_layers=2, batch_first=True, dropout=0.2)
        self.proj = nn.Linear(HID, VOCAB)

    def forward(self, x, hidden=None):
        out, hidden = self.lstm(self.embed(x), hidden)
        return self.proj(out), hidden


model = LSTMLM().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
data = torch.randint(0, VOCAB, (B, 4 * T + 1), device=device)
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

hidden = None
for step in range(4):
    x = data[:, step * T : (step + 1) * T]
    y = data[:, step * T + 1 : (step + 1) * T + 1]
    if hidden is not None:
        hidden = tuple(h.detach() for h in hidden)
    logits, hidden = model(x, hidden)
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()
