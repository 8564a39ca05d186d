"""An RNN-Transducer written by hand: a 4-layer bidirectional LSTM encoder over 80-d filterbank
frames (stride-2 stacking to 300 frames), an embedding + 2-layer LSTM prediction network over
60 label tokens, and the joint network broadcast over (batch, frames, labels+1, vocab 1024) with
log_softmax; a loss from gathered target and blank log-probabilities (no lattice recursion);
Adam, batch 8, fp32, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5801)
B, T, U, V, H = (2, 20, 5, 32, 16) if SMALL else (8, 600, 60, 1024, 320)


class Transducer(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.LSTM(160, H, num_layers=4, bidirectional=True, batch_first=True)
        self.enc_proj = nn.Linear(2 * H, 512)
        self.embed = nn.Embedding(V, H)
        self.predictor = nn.LSTM(H, H, num_layers=2, batch_first=True)
        self.pred_proj = nn.Linear(H, 512)
        self.out = nn.Linear(512, V)

    def forward(self, feats, labels):
        b, t, f = feats.shape
        enc, _ = self.encoder(feats.reshape(b, t // 2, 2 * f))
        blank = torch.zeros(b, 1, dtype=torch.long, device=labels.device)
        pred, _ = self.predictor(self.embed(torch.cat([blank, labels], dim=1)))
        joint = self.enc_proj(enc).unsqueeze(2) + self.pred_proj(pred).unsqueeze(1)
        return F.log_softmax(self.out(torch.tanh(joint)), dim=-1)


device = "cuda" if torch.cuda.is_available() else "cpu"
model = Transducer().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    feats = torch.randn(B, T, 80, device=device)
    labels = torch.randint(1, V, (B, U), device=device)
    logp = model(feats, labels)
    emit = logp[:, :, :-1, :].gather(-1, labels[:, None, :, None].expand(-1, logp.shape[1], -1, 1))
    loss = -(emit.mean() + logp[..., 0].mean())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del feats, labels, logp, emit, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
