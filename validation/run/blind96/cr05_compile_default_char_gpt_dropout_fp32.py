"""torch.compile in its default mode (Inductor, no CUDA graphs) on a small character-level GPT
(6 blocks of 512 wide, 8 heads, a 256-symbol vocabulary, learned positions) trained in fp32 (TF32
matmuls allowed) with dropout 0.2 on the embeddings, in attention and after each residual branch
(the compiled graph draws its own random numbers), foreach Adam with a OneCycleLR schedule and
gradient clipping, batch 32 x 512 characters, 4 steps; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9605)
V, D, H, NL, B, L = (256, 64, 4, 2, 4, 32) if SMALL else (256, 512, 8, 6, 32, 512)
P = 0.2
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D), nn.Dropout(P))
        self.drop = nn.Dropout(P)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(b, n, H, D // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=P if self.training else 0.0, is_causal=True)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, n, D)))
        return x + self.mlp(self.ln2(x))


class CharGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(1, L, D))
        self.drop = nn.Dropout(P)
        self.blocks = nn.Sequential(*[Block() for _ in range(NL)])
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, ids, targets):
        x = self.drop(self.tok(ids) + self.pos[:, : ids.shape[1]])
        logits = self.head(self.ln(self.blocks(x)))
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


model = CharGPT().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99), foreach=True)
sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=100)
cmodel = torch.compile(model)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    data = torch.randint(0, V, (B, L + 1), device=device)
    loss = cmodel(data[:, :-1], data[:, 1:])
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    sched.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del data, loss
