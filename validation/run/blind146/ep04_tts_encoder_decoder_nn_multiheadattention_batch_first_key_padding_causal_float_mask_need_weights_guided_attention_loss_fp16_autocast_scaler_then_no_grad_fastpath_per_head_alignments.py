"""A Transformer-TTS-style text-to-mel model built from nn.MultiheadAttention (batch_first): a text
encoder (4 layers, self-attention with a key padding mask over ragged text lengths), a mel decoder
(4 layers, causal float mask plus the mel padding mask, cross-attention over the encoder); d_model
512, 8 heads of 64, batch 32 of up to 183 characters and 611 mel frames (neither a multiple of 64).
Training under fp16 autocast with a GradScaler (Adam): L1 mel loss plus the guided attention loss
of Tachibana et al. on the last decoder layer's cross-attention weights, which that layer asks for
(need_weights=True, averaged over heads) while the others pass need_weights=False; 3 steps. Then
under no_grad in eval: the encoder alone (self-attention with query is key is value, MHA's fast
path), and the full model returning every cross-attention layer's per-head alignments
(average_attn_weights=False); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14604)
D, H, NE, ND, VOC, MEL, FF = (64, 2, 1, 1, 40, 20, 128) if SMALL else (512, 8, 4, 4, 148, 80, 2048)
B, TT, TM = (2, 17, 31) if SMALL else (32, 183, 611)
device = "cuda" if torch.cuda.is_available() else "cpu"


class EncLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa = nn.MultiheadAttention(D, H, dropout=0.1, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(D, FF), nn.ReLU(), nn.Dropout(0.1), nn.Linear(FF, D))
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, x, pad):
        x = self.n1(x + self.sa(x, x, x, key_padding_mask=pad, need_weights=False)[0])
        return self.n2(x + self.ff(x))


class DecLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.sa = nn.MultiheadAttention(D, H, dropout=0.1, batch_first=True)
        self.ca = nn.MultiheadAttention(D, H, dropout=0.1, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(D, FF), nn.ReLU(), nn.Dropout(0.1), nn.Linear(FF, D))
        self.n1, self.n2, self.n3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)

    def forward(self, y, mem, causal, ypad, xpad, weights, per_head=False):
        y = self.n1(y + self.sa(y, y, y, attn_mask=causal, key_padding_mask=ypad, need_weights=False)[0])
        c, w = self.ca(
            y, mem, mem, key_padding_mask=xpad, need_weights=weights, average_attn_weights=not per_head
        )
        y = self.n2(y + c)
        return self.n3(y + self.ff(y)), w


class TTS(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOC, D, padding_idx=0)
        self.prenet = nn.Sequential(nn.Linear(MEL, 256), nn.ReLU(), nn.Dropout(0.5), nn.Linear(256, D))
        self.enc = nn.ModuleList(EncLayer() for _ in range(NE))
        self.dec = nn.ModuleList(DecLayer() for _ in range(ND))
        self.mel = nn.Linear(D, MEL)

    def encode(self, text, xpad):
        x = self.emb(text)
        for layer in self.enc:
            x = layer(x, xpad)
        return x

    def forward(self, text, mel_in, xpad, ypad, per_head=False):
        mem = self.encode(text, xpad)
        t = mel_in.shape[1]
        causal = torch.full((t, t), float("-inf"), device=mel_in.device).triu(1)
        y = self.prenet(mel_in)
        aligns = []
        for i, layer in enumerate(self.dec):
            want = per_head or i == len(self.dec) - 1
            y, w = layer(y, mem, causal, ypad, xpad, want, per_head)
            if w is not None:
                aligns.append(w)
        return self.mel(y), aligns


def guided_attention_loss(w, tlen, mlen, g=0.2):
    n = torch.arange(w.shape[-1], device=w.device)[None, None, :] / tlen[:, None, None]
    t = torch.arange(w.shape[-2], device=w.device)[None, :, None] / mlen[:, None, None]
    gw = 1.0 - torch.exp(-((n - t) ** 2) / (2 * g * g))
    valid = (n <= 1) & (t <= 1)
    return (w * gw * valid).sum() / valid.sum()


def batch(bsz):
    tlen = torch.randint(TT // 2, TT + 1, (bsz,), device=device)
    tlen[0] = TT
    mlen = torch.randint(TM // 2, TM + 1, (bsz,), device=device)
    mlen[0] = TM
    xpad = torch.arange(TT, device=device)[None] >= tlen[:, None]
    ypad = torch.arange(TM, device=device)[None] >= mlen[:, None]
    text = torch.randint(1, VOC, (bsz, TT), device=device).masked_fill(xpad, 0)
    mel = torch.randn(bsz, TM, MEL, device=device).masked_fill(ypad[..., None], 0.0)
    mel_in = torch.cat((torch.zeros_like(mel[:, :1]), mel[:, :-1]), dim=1)
    return text, mel, mel_in, xpad, ypad, tlen.float(), mlen.float()


model = TTS().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    text, mel, mel_in, xpad, ypad, tlen, mlen = batch(B)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        pred, aligns = model(text, mel_in, xpad, ypad)
        l1 = (pred.float() - mel).abs().masked_fill(ypad[..., None], 0.0).sum() / (~ypad).sum() / MEL
        ga = guided_attention_loss(aligns[-1].float(), tlen, mlen)
        loss = l1 + ga
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} l1 {l1.item():.3f} ga {ga.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del pred, aligns, loss, l1, ga
model.eval()
with torch.no_grad():
    text, mel, mel_in, xpad, ypad, tlen, mlen = batch(2 * B)
    mem = model.encode(text, xpad)
    if device == "cuda":
        print(f"encoder fastpath {tuple(mem.shape)} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    pred, aligns = model(text, mel_in, xpad, ypad, per_head=True)
    focus = torch.stack([a.amax(-1).mean() for a in aligns])
if device == "cuda":
    print(
        f"alignments {len(aligns)} x {tuple(aligns[0].shape)} focus {focus.mean().item():.3f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
