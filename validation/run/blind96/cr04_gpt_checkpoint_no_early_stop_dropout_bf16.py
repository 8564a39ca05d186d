"""A hand-written GPT (8 blocks of 1,024 wide, 16 heads, a 50,304 vocabulary, GELU MLP) with
dropout in attention (F.scaled_dot_product_attention's dropout_p) and on the residual branches,
each block wrapped in non-reentrant torch.utils.checkpoint with preserve_rng_state=True under
torch.utils.checkpoint.set_checkpoint_early_stop(False) (the recomputation runs each whole block,
not stopping once the saved tensors are back); fp32 weights under bf16 autocast, fused AdamW,
batch 8 x 1,024 tokens, 3 steps, then an eval forward under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9604)
V, D, H, NL, B, L = (128, 64, 4, 2, 2, 32) if SMALL else (50304, 1024, 16, 8, 8, 1024)
P = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.drop = nn.Dropout(P)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=P if self.training else 0.0, is_causal=True)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, n, D)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(L, D)
        self.blocks = nn.ModuleList(Block() for _ in range(NL))
        self.ln = nn.LayerNorm(D)
        self.drop = nn.Dropout(P)

    def forward(self, ids):
        x = self.drop(self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device)))
        for block in self.blocks:
            if self.training:
                x = checkpoint(block, x, use_reentrant=False, preserve_rng_state=True)
            else:
                x = block(x)
        return self.ln(x) @ self.tok.weight.T


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, V, (B, L + 1), device=device)
    with set_checkpoint_early_stop(False), torch.autocast(device, dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids = torch.randint(0, V, (B, L), device=device)
    nxt = model(ids)[:, -1].argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(nxt.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
