"""A Conformer-CTC speech recogniser trained on ragged utterances under
PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128" (set before torch is imported): 80-bin log-mel
frames whose per-utterance lengths (300 to 1,600 frames) a seeded CPU generator draws, the batch of
24 padded to its own longest; two stride-2 Conv2d subsampling layers (4x in time), 8 Conformer blocks
of width 256 (macaron feed-forwards, nn.MultiheadAttention with a key_padding_mask, a convolution
module of pointwise Conv1d, GLU, depthwise Conv1d of kernel 31 with BatchNorm1d and SiLU), a
256-way character CTC head; bf16 autocast (CTC loss in fp32), AdamW with OneCycleLR, clipping; 30
steps in two phases of 15, then greedy CTC decoding of 3 ragged batches of 48 (repeats
and blanks dropped by masks); 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:128"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14305)
MEL, D, HEADS, LAYERS, VOCAB, KERNEL = (80, 32, 4, 2, 32, 7) if SMALL else (80, 256, 4, 8, 256, 31)
B, LO, HI = (3, 40, 90) if SMALL else (24, 300, 1600)
STEPS, PER_PHASE = (4, 2) if SMALL else (30, 15)
EVAL_B, EVAL_N = (4, 2) if SMALL else (48, 3)
device = "cuda" if torch.cuda.is_available() else "cpu"


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, 4 * D), nn.SiLU(), nn.Dropout(0.1),
                                 nn.Linear(4 * D, D), nn.Dropout(0.1))

    def forward(self, x):
        return self.net(x)


class ConvModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(D)
        self.pw1 = nn.Conv1d(D, 2 * D, 1)
        self.dw = nn.Conv1d(D, D, KERNEL, padding=KERNEL // 2, groups=D)
        self.bn = nn.BatchNorm1d(D)
        self.pw2 = nn.Conv1d(D, D, 1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad):
        x = self.norm(x).masked_fill(pad[..., None], 0.0).transpose(1, 2)
        x = F.glu(self.pw1(x), dim=1)
        x = self.pw2(F.silu(self.bn(self.dw(x))))
        return self.drop(x.transpose(1, 2))


class ConformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ff1, self.ff2 = FeedForward(), FeedForward()
        self.attn_norm = nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, HEADS, dropout=0.1, batch_first=True)
        self.conv = ConvModule()
        self.out_norm = nn.LayerNorm(D)

    def forward(self, x, pad):
        x = x + 0.5 * self.ff1(x)
        h = self.attn_norm(x)
        x = x + self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        x = x + self.conv(x, pad)
        x = x + 0.5 * self.ff2(x)
        return self.out_norm(x)


class ConformerCTC(nn.Module):
    def __init__(self):
        super().__init__()
        self.sub = nn.Sequential(nn.Conv2d(1, D, 3, stride=2), nn.ReLU(), nn.Conv2d(D, D, 3, stride=2), nn.ReLU())
        freq = ((MEL - 1) // 2 - 1) // 2
        self.proj = nn.Linear(D * freq, D)
        self.blocks = nn.ModuleList([ConformerBlock() for _ in range(LAYERS)])
        self.head = nn.Linear(D, VOCAB)

    def forward(self, feats, lengths):
        x = self.sub(feats.unsqueeze(1))
        b, c, t, f = x.shape
        x = self.proj(x.permute(0, 2, 1, 3).reshape(b, t, c * f))
        out_len = ((lengths - 1) // 2 - 1) // 2
        pad = torch.arange(t, device=x.device)[None] >= out_len[:, None]
        for blk in self.blocks:
            x = blk(x, pad)
        return self.head(x), out_len


def ragged(batch):
    lengths = torch.randint(LO, HI + 1, (batch,), generator=gen)
    feats = torch.randn(batch, int(lengths.max()), MEL, generator=gen)
    feats[torch.arange(feats.shape[1])[None] >= lengths[:, None]] = 0.0
    out_len = ((lengths - 1) // 2 - 1) // 2
    tgt_len = torch.clamp(out_len // 3, min=1)
    targets = torch.randint(1, VOCAB, (int(tgt_len.sum()),), generator=gen)
    return feats.to(device), lengths.to(device), targets.to(device), tgt_len, out_len


gen = torch.Generator().manual_seed(3)
model = ConformerCTC().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-3)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=STEPS)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    feats, lengths, targets, tgt_len, frames = ragged(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits, _ = model(feats, lengths)
    log_probs = logits.float().log_softmax(-1).transpose(0, 1)
    loss = F.ctc_loss(log_probs, targets, frames.to(device), tgt_len.to(device), blank=0, zero_infinity=True)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    opt.step()
    sched.step()
    if (step + 1) % PER_PHASE == 0 and device == "cuda":
        print(
            f"steps to {step} frames {feats.shape[1]} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del feats, lengths, targets, logits, log_probs, loss

model.eval()
decoded = 0
with torch.no_grad():
    for _ in range(EVAL_N):
        feats, lengths, _, _, frames = ragged(EVAL_B)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits, _ = model(feats, lengths)
        best = logits.argmax(-1)
        valid = (torch.arange(best.shape[1])[None] < frames[:, None]).to(device)
        new = torch.ones_like(valid)
        new[:, 1:] = best[:, 1:] != best[:, :-1]
        decoded += int(((best != 0) & new & valid).sum())
        del feats, lengths, logits, best, valid, new
if device == "cuda":
    print(f"decoded {decoded} symbols peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
print(f"done {decoded >= 0}")
