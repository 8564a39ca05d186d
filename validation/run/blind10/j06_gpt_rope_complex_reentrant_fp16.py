"""A hand-written decoder-only transformer with rotary embeddings applied through torch.view_as_complex /
torch.polar, causal SDPA, blocks under torch.utils.checkpoint(use_reentrant=True), fp32 weights under fp16
autocast with GradScaler, SGD with Nesterov momentum, batch 8 x 1024, 768 wide, 8 layers, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
WIDTH, LAYERS, HEADS, VOCAB = (32, 1, 2, 100) if SMALL else (768, 8, 12, 32000)
BATCH, SEQ = (2, 16) if SMALL else (8, 1024)
torch.manual_seed(1006)
device = "cuda" if torch.cuda.is_available() else "cpu"


def rope(x, freqs):
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs).flatten(-2).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.proj = nn.Linear(WIDTH, WIDTH, bias=False)
        self.ln2 = nn.LayerNorm(WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.out = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x, freqs):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, c // HEADS).transpose(1, 3).unbind(2)
        q, k = rope(q, freqs), rope(k, freqs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        half = WIDTH // HEADS // 2
        inv = 1.0 / (10000 ** (torch.arange(half).float() / half))
        angles = torch.outer(torch.arange(SEQ).float(), inv)
        self.register_buffer("freqs", torch.polar(torch.ones_like(angles), angles), persistent=False)

    def forward(self, ids):
        x = self.emb(ids)
        for block in self.blocks:
            x = checkpoint(block, x, self.freqs, use_reentrant=True)
        return self.head(self.ln(x))


model = GPT().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
scaler = torch.amp.GradScaler(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.view(-1, VOCAB), ids[:, 1:].reshape(-1))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
