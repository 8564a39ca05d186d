"""torch.compile in its default mode (Inductor, no CUDA graphs) on an FT-Transformer for tabular
data: 48 numeric features tokenized by per-feature affine maps, 26 categorical features through one
shared embedding table with per-feature offsets (cardinalities 3 to 20,000), a CLS token, 4 pre-norm
blocks of 192 wide with 8 heads and ReGLU feed-forward, attention dropout 0.2 and residual dropout
0.1 (random numbers drawn inside the compiled graph); binary cross entropy with logits, AdamW with
no decay for the tokenizers and norms, fp32, batch 2048, 3 steps, then an eval of 8192 rows under
no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10708)
NNUM, D, H, NL, B, BE = (6, 32, 4, 1, 64, 128) if SMALL else (48, 192, 8, 4, 2048, 8192)
CARDS = [3 + (7919 * i) % 20000 for i in range(4 if SMALL else 26)]
device = "cuda" if torch.cuda.is_available() else "cpu"


class Tokenizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_w = nn.Parameter(torch.randn(NNUM, D) * 0.1)
        self.num_b = nn.Parameter(torch.zeros(NNUM, D))
        self.cat = nn.Embedding(sum(CARDS), D)
        self.register_buffer("offsets", torch.tensor([0, *CARDS[:-1]]).cumsum(0))
        self.cls = nn.Parameter(torch.randn(1, 1, D) * 0.1)

    def forward(self, x_num, x_cat):
        num = x_num[..., None] * self.num_w + self.num_b
        cat = self.cat(x_cat + self.offsets)
        return torch.cat([self.cls.expand(x_num.shape[0], -1, -1), num, cat], dim=1)


class Block(nn.Module):
    def __init__(self, first):
        super().__init__()
        self.n1 = nn.Identity() if first else nn.LayerNorm(D)
        self.n2 = nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.ff1, self.ff2 = nn.Linear(D, 2 * (4 * D // 3)), nn.Linear(4 * D // 3, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, n, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2 if self.training else 0.0)
        x = x + self.drop(self.o(a.transpose(1, 2).reshape(b, n, D)))
        u, g = self.ff1(self.n2(x)).chunk(2, dim=-1)
        return x + self.drop(self.ff2(u * F.relu(g)))


class FTTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = Tokenizer()
        self.blocks = nn.Sequential(*[Block(i == 0) for i in range(NL)])
        self.norm, self.head = nn.LayerNorm(D), nn.Linear(D, 1)

    def forward(self, x_num, x_cat):
        x = self.blocks(self.tok(x_num, x_cat))
        return self.head(F.relu(self.norm(x[:, 0]))).squeeze(-1)


def batch(n):
    x_num = torch.randn(n, NNUM, device=device)
    x_cat = torch.stack([torch.randint(0, c, (n,), device=device) for c in CARDS], dim=1)
    y = (x_num[:, 0] + x_num[:, 1] * x_num[:, 2] > 0).float()
    return x_num, x_cat, y


model = FTTransformer().to(device)
no_decay = [
    p for n, p in model.named_parameters() if n.startswith("tok.") or "norm" in n or n.endswith(".n2.weight")
]
decay = [p for n, p in model.named_parameters() if all(p is not q for q in no_decay)]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 1e-5}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-4
)
cmodel = torch.compile(model)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    x_num, x_cat, y = batch(B)
    loss = F.binary_cross_entropy_with_logits(cmodel(x_num, x_cat), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x_num, x_cat, y, loss
model.eval()
with torch.no_grad():
    x_num, x_cat, y = batch(BE)
    acc = ((cmodel(x_num, x_cat) > 0).float() == y).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
