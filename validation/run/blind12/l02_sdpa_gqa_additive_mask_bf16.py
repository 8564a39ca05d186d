"""A hand-written decoder with grouped-query attention through F.scaled_dot_product_attention(enable_gqa=True)
and an additive float mask (causal plus ALiBi-style distance bias, bf16), bf16 weights, RMSNorm,
AdamW(fused=True), batch 4 x 2048, 1024 wide, 16 query / 4 key-value heads, 6 layers, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
WIDTH, LAYERS, HQ, HKV, VOCAB = (64, 1, 4, 2, 100) if SMALL else (1024, 6, 16, 4, 32000)
BATCH, SEQ = (2, 16) if SMALL else (4, 2048)
HD = WIDTH // HQ
torch.manual_seed(1202)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(WIDTH), nn.RMSNorm(WIDTH)
        self.q = nn.Linear(WIDTH, HQ * HD, bias=False)
        self.kv = nn.Linear(WIDTH, 2 * HKV * HD, bias=False)
        self.o = nn.Linear(WIDTH, WIDTH, bias=False)
        self.up = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.down = nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x, bias):
        b, t, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, HQ, HD).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, HKV, HD).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.gelu(self.up(self.n2(x))))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.RMSNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        dist = (pos[None, :] - pos[:, None]).clamp(max=0).to(dtype)
        bias = (dist * 0.05).masked_fill(pos[None, :] > pos[:, None], float("-inf"))[None, None]
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, bias)
        return self.head(self.norm(x))


model = Model().to(device=device, dtype=dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
