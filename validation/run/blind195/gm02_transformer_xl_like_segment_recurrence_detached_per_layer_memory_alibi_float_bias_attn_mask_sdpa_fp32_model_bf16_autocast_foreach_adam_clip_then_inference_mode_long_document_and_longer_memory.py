"""A Transformer-XL-like language model with segment-level recurrence, where positions come from ALiBi
biases passed to F.scaled_dot_product_attention as a float attn_mask.

Model: GPT-2 vocabulary (50,257), width 768, 8 pre-LayerNorm blocks of 12 heads (64 each), GELU MLP of
3,072, tied embedding / output. Each block keeps a memory of the previous segment's inputs to that block
(the last MEM positions, detached: no gradient flows between segments); keys and values are computed from
[memory; segment]. The ALiBi bias (slopes 2 ** (-8 i / H)) of shape (1, H, SEG, MEM + SEG), with -inf
above the shifted diagonal, is built once in fp32 and passed as attn_mask (autocast casts it). fp32
weights under bf16 autocast, Adam (foreach default, lr 2.5e-4), clip_grad_norm_ 0.25 as in the
Transformer-XL recipe, batch 4 streams of segments of 2,048 tokens with a memory of 2,048.

Phases: the first segment (memory empty, so a (1, H, SEG, SEG) bias); 5 more segments carrying memory;
evaluation of a long document (8 segments at batch 8) under torch.inference_mode with the memory carried;
then training resumed with a memory of 4,096 positions for 2 segments. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19502)
if SMALL:
    VOCAB, D, LAYERS, HEADS = 1000, 64, 2, 4
    B, SEG, MEM, STEPS, EVAL_B, EVAL_SEGS, LONG_MEM = 2, 64, 64, 2, 2, 2, 128
else:
    VOCAB, D, LAYERS, HEADS = 50257, 768, 8, 12
    B, SEG, MEM, STEPS, EVAL_B, EVAL_SEGS, LONG_MEM = 4, 2048, 2048, 5, 8, 8, 4096
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def alibi_slopes(n):
    start = 2 ** (-8 / n)
    return torch.tensor([start ** (i + 1) for i in range(n)])


def alibi_bias(q_len, mem_len):
    k_len = mem_len + q_len
    qpos = torch.arange(mem_len, k_len, device=device)[:, None]
    kpos = torch.arange(k_len, device=device)[None, :]
    dist = (kpos - qpos).float()  # <= 0 for visible keys
    bias = alibi_slopes(HEADS).to(device)[:, None, None] * dist[None]
    bias = bias.masked_fill((kpos > qpos)[None], float("-inf"))
    return bias[None]


class XLBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.q = nn.Linear(D, D)
        self.kv = nn.Linear(D, 2 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mem, bias):
        b, t, _ = x.shape
        h = self.ln1(x)
        ctx = h if mem is None else torch.cat([self.ln1(mem), h], 1)
        q = self.q(h).view(b, t, HEADS, D // HEADS).transpose(1, 2)
        k, v = self.kv(ctx).view(b, ctx.shape[1], 2, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=0.1 if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, D)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class TransformerXL(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(XLBlock() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        nn.init.normal_(self.wte.weight, std=0.02)

    def forward(self, idx, mems, bias, mem_len):
        x = self.drop(self.wte(idx))
        new_mems = []
        for blk, mem in zip(self.blocks, mems, strict=True):
            cat = x if mem is None else torch.cat([mem, x], 1)
            new_mems.append(cat[:, -mem_len:].detach())
            x = blk(x, mem, bias)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return logits, new_mems


model = TransformerXL().to(device)
opt = torch.optim.Adam(model.parameters(), lr=2.5e-4)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")

stream = torch.randint(0, VOCAB, (B, SEG * (1 + STEPS + 2) + 1), device=device)
biases = {}


def get_bias(mem_len):
    if mem_len not in biases:
        biases[mem_len] = alibi_bias(SEG, mem_len)
    return biases[mem_len]


def train_segment(i, mems, mem_len):
    x = stream[:, i * SEG : (i + 1) * SEG]
    y = stream[:, i * SEG + 1 : (i + 1) * SEG + 1]
    cur = 0 if mems[0] is None else mems[0].shape[1]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits, mems = model(x, mems, get_bias(cur), mem_len)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    opt.step()
    return loss.item(), mems


model.train()
mems = [None] * LAYERS
loss, mems = train_segment(0, mems, MEM)
print(f"segment 0 loss {loss:.4f}")
if device == "cuda":
    print(f"first segment peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for i in range(1, STEPS + 1):
    loss, mems = train_segment(i, mems, MEM)
print(f"segment {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
doc = torch.randint(0, VOCAB, (EVAL_B, SEG * EVAL_SEGS + 1), device=device)
nll, count = 0.0, 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    eval_mems = [None] * LAYERS
    for i in range(EVAL_SEGS):
        cur = 0 if eval_mems[0] is None else eval_mems[0].shape[1]
        logits, eval_mems = model(doc[:, i * SEG : (i + 1) * SEG], eval_mems, get_bias(cur), MEM)
        nll += F.cross_entropy(
            logits.float().view(-1, VOCAB),
            doc[:, i * SEG + 1 : (i + 1) * SEG + 1].reshape(-1),
            reduction="sum",
        ).item()
        count += logits.shape[0] * logits.shape[1]
    del eval_mems, logits
print(f"eval ppl over {SEG * EVAL_SEGS} tokens: {math.exp(min(nll / count, 20)):.1f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for i in range(STEPS + 1, STEPS + 3):
    loss, mems = train_segment(i, mems, LONG_MEM)
print(f"long-memory segment {i} loss {loss:.4f} memory {mems[0].shape[1]}")
if device == "cuda":
    print(
        f"long memory allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
