"""A GRU encoder-decoder with teacher forcing and dot-product attention over the encoder states,
fp32, Adam with amsgrad, per-parameter gradient clipping by norm (foreach=False) and
ReduceLROnPlateau, 2-layer bidirectional encoder of 512, decoder of 1024, batch 64, 200 source and
100 target tokens, 3 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3904)
V, E, H, B, S, T = (64, 16, 16, 2, 10, 6) if SMALL else (16000, 256, 512, 64, 200, 100)


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.src = nn.Embedding(V, E)
        self.tgt = nn.Embedding(V, E)
        self.enc = nn.GRU(E, H, num_layers=2, bidirectional=True, batch_first=True)
        self.dec = nn.GRU(E, 2 * H, batch_first=True)
        self.out = nn.Linear(4 * H, V)

    def forward(self, src, tgt):
        mem, _ = self.enc(self.src(src))
        dec, _ = self.dec(self.tgt(tgt))
        attn = torch.softmax(dec @ mem.transpose(1, 2), dim=-1)
        ctx = attn @ mem
        return self.out(torch.cat([dec, ctx], dim=-1))


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Seq2Seq().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, amsgrad=True)
plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    src = torch.randint(0, V, (B, S), device=device)
    tgt = torch.randint(0, V, (B, T + 1), device=device)
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, V), tgt[:, 1:].reshape(-1))
    loss.backward()
    for p in model.parameters():
        torch.nn.utils.clip_grad_norm_([p], 1.0, foreach=False)
    optimizer.step()
    plateau.step(float(step))
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
