"""A CTC speech recogniser as a user writes it with torch.nn alone: 80-bin log-mel features
(torch.randn stand-in) of per-utterance lengths, a 2-layer Conv2d front end (stride 2 each) with a
channels LayerNorm (permute, nn.LayerNorm, permute back) and GELU, a 3-layer bidirectional LSTM of
640 over pack_padded_sequence(enforce_sorted=False) and pad_packed_sequence, a projection to 29
characters + blank, log_softmax in fp32 and nn.CTCLoss(zero_infinity=True) over padded targets of
per-utterance lengths; fp16 autocast with GradScaler, Adam, clip_grad_norm_(foreach=True) after
unscale_; 3 steps at batch 48 x 1,200 frames, then a greedy CTC decode of 96 utterances under no_grad
(argmax, the repeat/blank collapse mask counted per utterance); 5 phases."""

import os

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13502)
B, TMAX, HID, UMAX, NEVAL = (4, 64, 32, 10, 6) if SMALL else (48, 1200, 640, 180, 96)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
NMEL, NCHAR = 80, 30


class LayerNorm2d(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class Recogniser(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Sequential(
            nn.Conv2d(1, 32, 3, stride=2, padding=1),
            LayerNorm2d(32),
            nn.GELU(),
            nn.Conv2d(32, 32, 3, stride=2, padding=1),
            LayerNorm2d(32),
            nn.GELU(),
        )
        self.rnn = nn.LSTM(
            32 * (NMEL // 4), HID, num_layers=3, bidirectional=True, batch_first=True, dropout=0.1
        )
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(2 * HID, NCHAR)

    def forward(self, feats, lengths):
        x = self.front(feats.unsqueeze(1))  # B, C, T/4, F/4
        b, c, t, f = x.shape
        x = x.permute(0, 2, 1, 3).reshape(b, t, c * f)
        lengths = ((lengths + 1) // 2 + 1) // 2
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.rnn(packed)
        y, _ = pad_packed_sequence(y, batch_first=True, total_length=t)
        return self.out(self.drop(y)), lengths


def batch(n):
    lengths = torch.randint(TMAX // 2, TMAX + 1, (n,))
    lengths[0] = TMAX
    feats = torch.randn(n, TMAX, NMEL, device=device)
    feats = feats * (torch.arange(TMAX, device=device)[None, :, None] < lengths.to(device)[:, None, None])
    tlen = torch.randint(UMAX // 3, UMAX + 1, (n,))
    targets = torch.randint(1, NCHAR, (n, UMAX), device=device)
    return feats, lengths.to(device), targets, tlen.to(device)


model = Recogniser().to(device)
ctc = nn.CTCLoss(blank=0, zero_infinity=True)
opt = torch.optim.Adam(model.parameters(), lr=3e-4)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    feats, lengths, targets, tlen = batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits, out_len = model(feats, lengths)
    logp = logits.float().log_softmax(-1).transpose(0, 1)
    loss = ctc(logp, targets, out_len, tlen)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=True)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    feats, lengths, targets, tlen = batch(NEVAL)
    logits, out_len = model(feats, lengths)
    best = logits.argmax(-1)
    valid = torch.arange(best.size(1), device=device)[None] < out_len[:, None]
    keep = (best != 0) & valid
    keep[:, 1:] &= best[:, 1:] != best[:, :-1]
    hyp_len = keep.sum(1)
if device == "cuda":
    print(
        f"decode mean_len {hyp_len.float().mean().item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
