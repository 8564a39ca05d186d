"""A Conformer encoder for speech (conv subsampling by 4, then blocks of half-step feed-forward,
nn.MultiheadAttention with a key padding mask, a convolution module with pointwise conv, GLU, depthwise
conv1d and BatchNorm1d, a second half-step feed-forward, LayerNorm), CTC loss, fp32 weights under fp16
autocast with GradScaler, AdamW, batch 16 utterances of 1,600 frames x 80 mel bins, 6 blocks of 256, 2 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1603)
B, T, MEL, D, HEADS, LAYERS, VOCAB = (2, 64, 8, 16, 2, 1, 10) if SMALL else (16, 1600, 80, 256, 4, 6, 128)
device = "cuda" if torch.cuda.is_available() else "cpu"


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(D),
            nn.Linear(D, 4 * D),
            nn.SiLU(),
            nn.Dropout(0.1),
            nn.Linear(4 * D, D),
            nn.Dropout(0.1),
        )

    def forward(self, x):
        return self.net(x)


class ConvModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.pw1 = nn.Conv1d(D, 2 * D, 1)
        self.dw = nn.Conv1d(D, D, 31, padding=15, groups=D)
        self.bn = nn.BatchNorm1d(D)
        self.pw2 = nn.Conv1d(D, D, 1)

    def forward(self, x):
        y = self.ln(x).transpose(1, 2)
        y = F.glu(self.pw1(y), dim=1)
        y = self.pw2(F.silu(self.bn(self.dw(y))))
        return y.transpose(1, 2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff1, self.ff2 = FeedForward(), FeedForward()
        self.ln_att = nn.LayerNorm(D)
        self.att = nn.MultiheadAttention(D, HEADS, dropout=0.1, batch_first=True)
        self.conv = ConvModule()
        self.ln = nn.LayerNorm(D)

    def forward(self, x, pad):
        x = x + 0.5 * self.ff1(x)
        h = self.ln_att(x)
        x = x + self.att(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        x = x + self.conv(x)
        x = x + 0.5 * self.ff2(x)
        return self.ln(x)


class Conformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, D, 3, 2), nn.ReLU(), nn.Conv2d(D, D, 3, 2), nn.ReLU())
        self.proj = nn.Linear(D * (((MEL - 1) // 2 - 1) // 2), D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.out = nn.Linear(D, VOCAB)

    def forward(self, mel, lengths):
        x = self.sub(mel.unsqueeze(1))
        b, c, t, f = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        lengths = ((lengths - 1) // 2 - 1) // 2
        pad = torch.arange(t, device=x.device)[None, :] >= lengths[:, None]
        for blk in self.blocks:
            x = blk(x, pad)
        return self.out(x).log_softmax(-1), lengths


model = Conformer().to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    mel = torch.randn(B, T, MEL, device=device)
    lengths = torch.full((B,), T, dtype=torch.long, device=device)
    lengths[B // 2 :] = T * 3 // 4
    targets = torch.randint(1, VOCAB, (B, T // 16), device=device)
    target_lengths = torch.full((B,), T // 16, dtype=torch.long, device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        logp, out_lengths = model(mel, lengths)
    loss = F.ctc_loss(logp.float().transpose(0, 1), targets, out_lengths, target_lengths)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
