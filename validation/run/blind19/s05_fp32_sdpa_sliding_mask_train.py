"""A hand-written decoder (8 layers, width 768, 12 heads, RMSNorm by hand, rotary embeddings by hand)
in fp32 without autocast, SDPA given a boolean sliding-window causal mask (window 256) broadcast over
batch and heads, AdamW (foreach) with clip_grad_norm_, batch 8 x 1024 tokens, 2 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1905)
WIDTH, DEPTH, HEADS, VOCAB, B, T, WINDOW = (
    (64, 2, 4, 300, 2, 32, 8) if SMALL else (768, 8, 12, 32000, 8, 1024, 256)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def rotate(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.Parameter(torch.ones(WIDTH))
        self.n2 = nn.Parameter(torch.ones(WIDTH))
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.o = nn.Linear(WIDTH, WIDTH, bias=False)
        self.up = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.down = nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(rms(x, self.n1)).view(b, t, 3, HEADS, -1).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.silu(self.up(rms(x, self.n2))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.layers = nn.ModuleList(Layer() for _ in range(DEPTH))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        hd = WIDTH // HEADS
        inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=ids.device).float() / hd))
        freqs = torch.outer(torch.arange(t, device=ids.device).float(), inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        i = torch.arange(t, device=ids.device)
        mask = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < WINDOW)
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head(x)


model = Model().to(device).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, VOCAB, (B, T + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    del logits
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
