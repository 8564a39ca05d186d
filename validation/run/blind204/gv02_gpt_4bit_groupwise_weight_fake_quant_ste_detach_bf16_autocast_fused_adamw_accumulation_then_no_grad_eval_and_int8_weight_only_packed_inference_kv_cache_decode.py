"""Weight-only quantization-aware fine-tuning of a hand-written GPT decoder, then int8 weight-only
inference with packed weights.

Model: GPT-2-style pre-LN decoder, 12 layers, d_model 1024, 16 heads, MLP 4096 with GELU, vocabulary
32,000, context 1024, learned positions, tied embedding / lm_head, SDPA with is_causal. Every Linear of
the blocks (qkv, proj, fc, fc2) fake-quantizes its fp32 weight to 4 bits group-wise (groups of 128 input
features, asymmetric min/max per group, scale and zero point recomputed each forward) with the
straight-through estimator written as w + (w_q - w).detach().

Training: bf16 autocast, fp32 weights, fused AdamW (lr 3e-4, weight decay 0.1 on matrices), batch 8 x
1024 tokens as 2 micro-batches of 4 (gradient accumulation), gradient clipping at 1.0.

Inference: the fine-tuned block weights are packed to int8 per output channel (symmetric, bf16 scales);
the training model's fp32 weights and the optimizer are freed. A bf16 model computes each Linear as
F.linear(x, w_int8.to(bf16) * scale); prefill of 4 prompts of 512 tokens into a preallocated KV cache,
then 16 greedy decode steps.

Phases: the first optimizer step; 2 more steps; evaluation loss under no_grad at batch 8; packing and
freeing; prefill and decode under inference_mode. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2042)
if SMALL:
    VOCAB, D, LAYERS, HEADS, CTX, MICRO, ACCUM, PROMPT, NEW = 512, 256, 2, 4, 128, 2, 2, 32, 4
else:
    VOCAB, D, LAYERS, HEADS, CTX, MICRO, ACCUM, PROMPT, NEW = 32000, 1024, 12, 16, 1024, 4, 2, 512, 16
GROUP = 128
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def fake_quant_groupwise(w, bits=4, group=GROUP):
    out_f, in_f = w.shape
    wg = w.reshape(out_f, in_f // group, group)
    wmin = wg.amin(dim=-1, keepdim=True)
    wmax = wg.amax(dim=-1, keepdim=True)
    qmax = 2**bits - 1
    scale = (wmax - wmin).clamp(min=1e-8) / qmax
    zero = torch.round(-wmin / scale)
    q = torch.clamp(torch.round(wg / scale) + zero, 0, qmax)
    wq = ((q - zero) * scale).reshape(out_f, in_f)
    return w + (wq - w).detach()


class QATLinear(nn.Linear):
    def forward(self, x):
        return F.linear(x, fake_quant_groupwise(self.weight), self.bias)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = QATLinear(D, 3 * D)
        self.proj = QATLinear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = QATLinear(D, 4 * D)
        self.fc2 = QATLinear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(CTX, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight
        for n, p in self.named_parameters():
            if p.ndim == 2:
                nn.init.normal_(
                    p, std=0.02 / math.sqrt(2 * LAYERS) if n.endswith(("proj.weight", "fc2.weight")) else 0.02
                )

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


model = GPT().to(device)
decay = [p for p in model.parameters() if p.ndim == 2]
no_decay = [p for p in model.parameters() if p.ndim < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def train_step():
    for _ in range(ACCUM):
        idx = torch.randint(0, VOCAB, (MICRO, CTX + 1), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), idx[:, 1:].reshape(-1)) / ACCUM
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item() * ACCUM


model.train()
print(f"step 0 loss {train_step():.4f}")
report("first step")
for _ in range(2):
    loss = train_step()
print(f"step 2 loss {loss:.4f}")
report("train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    idx = torch.randint(0, VOCAB, (MICRO * ACCUM, CTX + 1), device=device)
    logits = model(idx[:, :-1])
    eval_loss = F.cross_entropy(logits.float().view(-1, VOCAB), idx[:, 1:].reshape(-1)).item()
del logits, idx
print(f"eval loss {eval_loss:.4f}")
report("eval")

dtype = torch.bfloat16
packed = {}
with torch.no_grad():
    for n, m in model.named_modules():
        if isinstance(m, QATLinear):
            w = m.weight.detach()
            scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127
            packed[n] = (
                torch.round(w / scale).clamp(-127, 127).to(torch.int8),
                scale.to(dtype),
                m.bias.detach().to(dtype),
            )
    dense = {
        n: p.detach().to(dtype)
        for n, p in model.named_parameters()
        if not any(n.startswith(k) and n[len(k) :] in (".weight", ".bias") for k in packed)
    }
del model, opt, decay, no_decay
if device == "cuda":
    torch.cuda.empty_cache()
print(f"packed {len(packed)} linears")
report("pack")


def qlinear(name, x):
    w, scale, bias = packed[name]
    return F.linear(x, w.to(x.dtype) * scale, bias)


def ln(name, x):
    return F.layer_norm(x, (D,), dense[name + ".weight"], dense[name + ".bias"])


B = MICRO
cache_len = PROMPT + NEW
k_cache = torch.zeros(LAYERS, B, HEADS, cache_len, D // HEADS, device=device, dtype=dtype)
v_cache = torch.zeros_like(k_cache)


def forward_cached(idx, start):
    b, t = idx.shape
    pos = torch.arange(start, start + t, device=device)
    x = F.embedding(idx, dense["wte.weight"]) + F.embedding(pos, dense["wpe.weight"])
    for i in range(LAYERS):
        p = f"blocks.{i}"
        q, k, v = qlinear(p + ".qkv", ln(p + ".ln1", x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        k_cache[i, :, :, start : start + t] = k
        v_cache[i, :, :, start : start + t] = v
        a = F.scaled_dot_product_attention(
            q, k_cache[i, :, :, : start + t], v_cache[i, :, :, : start + t], is_causal=t > 1
        )
        x = x + qlinear(p + ".proj", a.transpose(1, 2).reshape(b, t, D))
        x = x + qlinear(p + ".fc2", F.gelu(qlinear(p + ".fc", ln(p + ".ln2", x)), approximate="tanh"))
    x = ln("ln_f", x[:, -1:])
    return F.linear(x, dense["wte.weight"])


with torch.inference_mode():
    prompt = torch.randint(0, VOCAB, (B, PROMPT), device=device)
    nxt = forward_cached(prompt, 0).argmax(-1)
    out = [nxt]
    for s in range(NEW - 1):
        nxt = forward_cached(nxt, PROMPT + s).argmax(-1)
        out.append(nxt)
    tokens = torch.cat(out, dim=1).cpu()
print(f"generated {tuple(tokens.shape)} first row {tokens[0, :8].tolist()}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
