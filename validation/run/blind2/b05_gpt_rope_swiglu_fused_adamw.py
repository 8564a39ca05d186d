"""Hand-written Llama-style GPT (RMSNorm, RoPE, SwiGLU, F.scaled_dot_product_attention, untied head), fp32
weights under bf16 autocast, AdamW(fused=True), clip_grad_norm_, width 768 / seq 1024."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

DIM, LAYERS, HEADS, SEQ, VOCAB, B = (
    (64, 2, 4, 32, 512, 2) if os.environ.get("SMOKE") else (768, 8, 12, 1024, 32768, 8)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(2024)


def rope_tables(seq, head_dim, base=10000.0):
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.outer(torch.arange(seq).float(), inv)
    return freqs.cos(), freqs.sin()


def apply_rope(x, cos, sin):
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.hd = DIM // HEADS
        self.wq = nn.Linear(DIM, DIM, bias=False)
        self.wk = nn.Linear(DIM, DIM, bias=False)
        self.wv = nn.Linear(DIM, DIM, bias=False)
        self.wo = nn.Linear(DIM, DIM, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, HEADS, self.hd).transpose(1, 2)
        k = self.wk(x).view(b, t, HEADS, self.hd).transpose(1, 2)
        v = self.wv(x).view(b, t, HEADS, self.hd).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, DIM))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        hidden = int(8 * DIM / 3)
        self.w1 = nn.Linear(DIM, hidden, bias=False)
        self.w3 = nn.Linear(DIM, hidden, bias=False)
        self.w2 = nn.Linear(hidden, DIM, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = nn.RMSNorm(DIM)
        self.attn = Attention()
        self.ffn_norm = nn.RMSNorm(DIM)
        self.ffn = FeedForward()

    def forward(self, x, cos, sin):
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.ffn(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(DIM)
        self.out = nn.Linear(DIM, VOCAB, bias=False)
        cos, sin = rope_tables(SEQ, DIM // HEADS)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx):
        t = idx.shape[1]
        h = self.tok(idx)
        for layer in self.layers:
            h = layer(h, self.cos[:t], self.sin[:t])
        return self.out(self.norm(h))


model = Transformer().to(device)
n_params = sum(p.numel() for p in model.parameters())
print(f"{n_params / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
if device == "cuda":
    print(f"after init {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    tokens = torch.randint(0, VOCAB, (B, SEQ + 1), device=device)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(inputs)
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} norm {norm.item():.2f} "
            f"peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
