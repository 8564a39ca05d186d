"""Hand-written pre-LN causal transformer LM (1536 wide, 16 layers, SDPA is_causal, GELU MLP, 32k vocab,
untied head; 553M), fp32, one step without checkpointing, then two with `torch.utils.checkpoint(block,
x, use_reentrant=True)` per block (the old default; the embedding output requires grad), SGD momentum
nesterov with `foreach=False` + OneCycleLR, batch 16 x 1024."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

D, LAYERS, HEADS, VOCAB, B, T = (
    (64, 2, 4, 300, 2, 32) if os.environ.get("SMOKE") else (1536, 16, 12, 32000, 16, 1024)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(606)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.use_checkpoint = False

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True) if self.use_checkpoint else block(x)
        return self.head(self.ln_f(x))


model = LM().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.SGD(
    model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4, foreach=False
)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=100)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    model.use_checkpoint = step > 0
    idx = torch.randint(0, VOCAB, (B, T + 1), device=device)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.view(-1, VOCAB), idx[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} checkpoint {model.use_checkpoint} loss {loss.item():.3f} "
            f"peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
