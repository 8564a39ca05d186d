"""A decoder alternating local and global attention layers (the Gemma-2 pattern) with heads of 256:
d_model 1536, 6 query heads and 2 key/value heads, 6 layers, rotary embeddings, sequence 1100 (not
a multiple of 64), batch 6. Global layers call SDPA with is_causal and enable_gqa; local layers
repeat K/V by hand and pass a boolean sliding-window mask (window 384) of shape (L, L). Two
training steps under sdpa_kernel([FLASH_ATTENTION, EFFICIENT_ATTENTION]) (the cuDNN backend turned
off, as some users do), one step with PyTorch's default choice, all under bf16 autocast with fp32
weights and AdamW (foreach), then an fp32 evaluation under no_grad with autocast off at batch 4;
5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14606)
if SMALL:
    D, H, KV, HD, NL, FF, V, L, B, EB, W = 128, 2, 1, 64, 2, 256, 500, 100, 2, 2, 32
else:
    D, H, KV, HD, NL, FF, V, L, B, EB, W = 1536, 6, 2, 256, 6, 6144, 32000, 1100, 6, 4, 384
device = "cuda" if torch.cuda.is_available() else "cpu"


def rope(seq, dim, dev):
    inv = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, device=dev).float() / dim))
    f = torch.outer(torch.arange(seq, device=dev).float(), inv)
    emb = torch.cat((f, f), dim=-1)
    return emb.cos(), emb.sin()


def rot(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Layer(nn.Module):
    def __init__(self, local):
        super().__init__()
        self.local = local
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-6), nn.RMSNorm(D, eps=1e-6)
        self.q = nn.Linear(D, H * HD, bias=False)
        self.kv = nn.Linear(D, 2 * KV * HD, bias=False)
        self.o = nn.Linear(H * HD, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin, window):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, H, HD).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, KV, HD).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = rot(q, cos, sin), rot(k, cos, sin)
        if self.local:
            k = k.repeat_interleave(H // KV, dim=1)
            v = v.repeat_interleave(H // KV, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=window)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, H * HD))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.gelu(g, approximate="tanh") * u)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer(local=i % 2 == 0) for i in range(NL))
        self.norm = nn.RMSNorm(D, eps=1e-6)

    def forward(self, idx):
        t = idx.shape[1]
        cos, sin = rope(t, HD, idx.device)
        i = torch.arange(t, device=idx.device)
        window = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < W)
        x = self.emb(idx) * D**0.5
        for layer in self.layers:
            x = layer(x, cos, sin, window)
        return F.linear(self.norm(x), self.emb.weight)


model = Model().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def step():
    idx = torch.randint(0, V, (B, L + 1), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
    for s in range(2):
        lv = step()
        if device == "cuda":
            print(
                f"flash/efficient step {s} loss {lv:.3f} peak {torch.cuda.max_memory_allocated()}"
                f" reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
lv = step()
if device == "cuda":
    print(f"default step loss {lv:.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (EB, L), device=device)
    logits = model(idx)
    nll = F.cross_entropy(logits[:, :-1].reshape(-1, V), idx[:, 1:].reshape(-1))
if device == "cuda":
    print(f"fp32 eval nll {nll.item():.3f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
