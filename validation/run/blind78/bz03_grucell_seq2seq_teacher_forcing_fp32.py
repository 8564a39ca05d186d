"""A GRU encoder (2 layers, cuDNN) and a decoder stepping an `nn.GRUCell` by hand for 64 steps with
teacher forcing and Luong dot attention over the encoder's 128 states, fp32, Adam with gradient
clipping, batch 64, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7803)
B, S, T, V, E, H = (2, 6, 4, 20, 8, 16) if SMALL else (64, 128, 64, 16000, 256, 512)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb, self.tgt_emb = nn.Embedding(V, E), nn.Embedding(V, E)
        self.encoder = nn.GRU(E, H, num_layers=2, batch_first=True)
        self.cell = nn.GRUCell(E + H, H)
        self.out = nn.Linear(2 * H, V)

    def forward(self, src, tgt):
        states, h = self.encoder(self.src_emb(src))
        h, ctx = h[-1], torch.zeros(src.shape[0], H, device=src.device)
        logits = []
        for t in range(tgt.shape[1]):
            h = self.cell(torch.cat([self.tgt_emb(tgt[:, t]), ctx], dim=1), h)
            weights = torch.softmax(torch.bmm(states, h.unsqueeze(2)).squeeze(2), dim=1)
            ctx = torch.bmm(weights.unsqueeze(1), states).squeeze(1)
            logits.append(self.out(torch.cat([h, ctx], dim=1)))
        return torch.stack(logits, dim=1)


model = Seq2Seq().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(0, V, (B, S), device=device)
    tgt = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
