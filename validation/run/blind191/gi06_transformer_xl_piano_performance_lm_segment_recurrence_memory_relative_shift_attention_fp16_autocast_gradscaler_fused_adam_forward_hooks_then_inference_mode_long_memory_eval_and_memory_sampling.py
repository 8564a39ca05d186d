"""A Transformer-XL (Dai et al. 2019) piano-performance language model written by hand, as used for
MAESTRO-style MIDI event sequences (390 events: note-on/off, time-shift, velocity, pad, end): 12
layers, d_model 512, 8 heads of 64, inner 2,048 (ReLU), post-LN, dropout 0.1, segment recurrence with a
memory of the previous segment's hidden states per layer (concatenated before K/V, detached, the last
mem_len kept) and relative positional attention: sinusoidal embeddings of the klen relative distances
through a bias-free r_net, global content and position biases r_w_bias / r_r_bias, score AC + BD where
BD is shifted by the zero-pad-and-reshape _rel_shift, the causal mask offset by the memory length
(masked_fill -inf), softmax over keys. The embedding is scaled by sqrt(d_model); untied output layer.

Training on segments of 512 events at batch 8 with mem_len 512, fp16 autocast and torch.amp.GradScaler
with a fused Adam (lr 2.5e-4, the scaler's found-inf handed to the fused kernel), gradient clipping at
0.25 after unscale_, forward hooks on every layer recording the mean absolute activation (detached
scalars kept in a list, as one watches training). Phases: the first segment (empty memory); 3 more
segments carrying the memory; evaluation under torch.inference_mode and fp16 autocast with the longer
evaluation memory of 1,536 over 4 segments (the hooks removed); then sampling 64 events one at a time
from a 512-event primer, the memory carried step by step (top-k 16 at temperature 0.9). 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19106)
if SMALL:
    LAYERS, D, HEADS, INNER, B, SEG, MEM, EVAL_MEM, SEGMENTS, NEW = 2, 64, 4, 128, 2, 32, 32, 64, 2, 8
else:
    LAYERS, D, HEADS, INNER, B, SEG, MEM, EVAL_MEM, SEGMENTS, NEW = 12, 512, 8, 2048, 8, 512, 512, 1536, 3, 64
VOCAB = 390
DH = D // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def rel_shift(x):
    b, h, q, k = x.shape
    zero_pad = x.new_zeros(b, h, q, 1)
    padded = torch.cat([zero_pad, x], dim=-1).view(b, h, k + 1, q)
    return padded[:, :, 1:].view_as(x)


class RelMultiHeadAttn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.r_net = nn.Linear(D, D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.drop = nn.Dropout(0.1)
        self.dropatt = nn.Dropout(0.0)
        self.ln = nn.LayerNorm(D)
        self.scale = 1 / math.sqrt(DH)

    def forward(self, x, pos_emb, r_w_bias, r_r_bias, mem):
        b, q, _ = x.shape
        cat = torch.cat([mem, x], dim=1) if mem is not None and mem.shape[1] > 0 else x
        k_len = cat.shape[1]
        heads = self.qkv(cat)
        r = self.r_net(pos_emb).view(k_len, HEADS, DH)
        wq, wk, wv = heads.chunk(3, dim=-1)
        wq = wq[:, -q:].view(b, q, HEADS, DH)
        wk = wk.view(b, k_len, HEADS, DH)
        wv = wv.view(b, k_len, HEADS, DH)
        ac = torch.einsum("bqhd,bkhd->bhqk", wq + r_w_bias, wk)
        bd = rel_shift(torch.einsum("bqhd,khd->bhqk", wq + r_r_bias, r))
        score = (ac + bd) * self.scale
        mask = torch.triu(torch.ones(q, k_len, dtype=torch.bool, device=x.device), diagonal=1 + k_len - q)
        score = score.float().masked_fill(mask, float("-inf"))
        prob = self.dropatt(F.softmax(score, dim=-1).type_as(wv))
        out = torch.einsum("bhqk,bkhd->bqhd", prob, wv).reshape(b, q, D)
        return self.ln(x + self.drop(self.o(out)))


class XLLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = RelMultiHeadAttn()
        self.ff = nn.Sequential(
            nn.Linear(D, INNER), nn.ReLU(), nn.Dropout(0.1), nn.Linear(INNER, D), nn.Dropout(0.1)
        )
        self.ln = nn.LayerNorm(D)

    def forward(self, x, pos_emb, r_w_bias, r_r_bias, mem):
        x = self.attn(x, pos_emb, r_w_bias, r_r_bias, mem)
        return self.ln(x + self.ff(x))


class TransformerXL(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList([XLLayer() for _ in range(LAYERS)])
        self.r_w_bias = nn.Parameter(torch.zeros(HEADS, DH))
        self.r_r_bias = nn.Parameter(torch.zeros(HEADS, DH))
        self.drop = nn.Dropout(0.1)
        self.out = nn.Linear(D, VOCAB)
        self.register_buffer("inv_freq", 1 / (10000 ** (torch.arange(0.0, D, 2.0) / D)))

    def forward(self, tokens, mems, mem_len):
        q = tokens.shape[1]
        m = mems[0].shape[1] if mems is not None else 0
        k_len = m + q
        pos_seq = torch.arange(k_len - 1, -1, -1.0, device=tokens.device)
        sinusoid = torch.outer(pos_seq, self.inv_freq)
        pos_emb = self.drop(torch.cat([sinusoid.sin(), sinusoid.cos()], dim=-1))
        h = self.drop(self.emb(tokens) * math.sqrt(D))
        hids = [h]
        for i, layer in enumerate(self.layers):
            h = layer(h, pos_emb, self.r_w_bias, self.r_r_bias, None if mems is None else mems[i])
            hids.append(h)
        with torch.no_grad():
            new_mems = []
            for i in range(LAYERS):
                cat = hids[i] if mems is None else torch.cat([mems[i], hids[i]], dim=1)
                new_mems.append(cat[:, -mem_len:].detach())
        return self.out(self.drop(h)), new_mems


model = TransformerXL().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=2.5e-4, fused=device == "cuda")
scaler = torch.amp.GradScaler("cuda", enabled=amp)

activation_log = []


def log_activation(module, inputs, output):
    activation_log.append(output.detach().abs().mean())


hooks = [layer.register_forward_hook(log_activation) for layer in model.layers]


def train_segment(mems):
    seq = torch.randint(0, VOCAB - 2, (B, SEG + 1), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits, mems = model(seq[:, :-1], mems, MEM)
        loss = F.cross_entropy(logits.float().reshape(-1, VOCAB), seq[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    scaler.step(opt)
    scaler.update()
    return loss.item(), mems


model.train()
loss, mems = train_segment(None)
print(f"segment 0 loss {loss:.4f} mean activation {torch.stack(activation_log).mean().item():.3f}")
activation_log.clear()
if device == "cuda":
    print(f"first segment peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for s in range(1, SEGMENTS + 1):
    loss, mems = train_segment(mems)
    print(f"segment {s} loss {loss:.4f} mean activation {torch.stack(activation_log).mean().item():.3f}")
    activation_log.clear()
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for hk in hooks:
    hk.remove()
del mems
model.eval()
total, count = 0.0, 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    mems = None
    for _ in range(4):
        seq = torch.randint(0, VOCAB - 2, (B, SEG + 1), device=device)
        logits, mems = model(seq[:, :-1], mems, EVAL_MEM)
        total += F.cross_entropy(logits.float().reshape(-1, VOCAB), seq[:, 1:].reshape(-1), reduction="sum")
        count += seq[:, 1:].numel()
print(f"eval loss {(total / count).item():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
del logits, mems

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    primer = torch.randint(0, VOCAB - 2, (B, SEG), device=device)
    logits, mems = model(primer, None, MEM)
    events = []
    for _ in range(NEW):
        vals, idx = torch.topk(logits[:, -1].float() / 0.9, 16, dim=-1)
        nxt = idx.gather(-1, torch.multinomial(F.softmax(vals, dim=-1), 1))
        events.append(nxt)
        logits, mems = model(nxt, mems, MEM)
    events = torch.cat(events, dim=1).cpu()
print(f"sampled {tuple(events.shape)}")
if device == "cuda":
    print(f"sampling peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
