"""FT-Transformer (Gorishniy et al. 2021) written by hand for a covertype-like multi-class table, then a
TabTransformer (Huang et al. 2020) on the same rows.

FT-Transformer: 64 numeric features tokenized by a per-feature linear map (x_j * W_j + b_j, W and b of
shape 64 x 192), 16 categorical features (cardinalities 3 .. 1,000) through one nn.Embedding with
category offsets plus a per-feature bias, a learned CLS token prepended (81 tokens of width 192). Three
pre-norm blocks (the first without its attention LayerNorm), 8-head self-attention through
F.scaled_dot_product_attention with attention dropout 0.2, a ReGLU feed-forward of hidden size 256 with
dropout 0.1; the last block computes attention for the CLS query only. Head: LayerNorm, ReLU, Linear to 7
classes, cross-entropy. Batch 8,192 rows made on the host (pinned, non_blocking copies), bf16 autocast,
fused AdamW (lr 1e-4, weight decay 1e-5 on all but norms, biases and embeddings).

Phases: the first training step; 4 more steps; evaluation of 65,536 rows in chunks of 16,384 under
torch.inference_mode and bf16 autocast with the softmax probabilities moved to the host; then a
TabTransformer in fp32 (the 16 categorical columns embedded at 32 dims and contextualized by 6 transformer
blocks of 8 heads, flattened and concatenated with the LayerNorm'd 64 numeric columns, an MLP 576 -> 1,024
-> 512 -> 7) trained 3 steps at batch 16,384 with SGD momentum 0.9 nesterov. 4 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19201)
np.random.seed(19201)
if SMALL:
    B, STEPS, EVAL_ROWS, EVAL_CHUNK, TT_B = 64, 1, 256, 128, 64
else:
    B, STEPS, EVAL_ROWS, EVAL_CHUNK, TT_B = 8192, 4, 65536, 16384, 16384
N_NUM = 64
CARDS = [3, 4, 7, 2, 40, 12, 100, 1000, 5, 31, 24, 60, 9, 250, 17, 500]
N_CLASSES = 7
D = 192
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class NumericTokenizer(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, d))
        self.bias = nn.Parameter(torch.empty(n, d))
        bound = d**-0.5
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x):
        return x[..., None] * self.weight + self.bias


class CategoricalTokenizer(nn.Module):
    def __init__(self, cards, d):
        super().__init__()
        self.register_buffer("offsets", torch.tensor([0, *np.cumsum(cards)[:-1].tolist()], dtype=torch.long))
        self.emb = nn.Embedding(sum(cards), d)
        self.bias = nn.Parameter(torch.zeros(len(cards), d))
        nn.init.uniform_(self.emb.weight, -(d**-0.5), d**-0.5)

    def forward(self, x):
        return self.emb(x + self.offsets) + self.bias


class Block(nn.Module):
    def __init__(self, d, heads, d_ffn, first, last):
        super().__init__()
        self.heads = heads
        self.attn_norm = nn.Identity() if first else nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ffn_norm = nn.LayerNorm(d)
        self.ffn_in = nn.Linear(d, 2 * d_ffn)
        self.ffn_out = nn.Linear(d_ffn, d)
        self.ffn_drop = nn.Dropout(0.1)
        self.last = last

    def forward(self, x):
        b, n, d = x.shape
        h = self.attn_norm(x)
        q, k, v = self.qkv(h).split(d, dim=-1)
        if self.last:
            q = q[:, :1]
            x = x[:, :1]
        q = q.reshape(b, -1, self.heads, d // self.heads).transpose(1, 2)
        k = k.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        v = v.reshape(b, n, self.heads, d // self.heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2 if self.training else 0.0)
        x = x + self.out(a.transpose(1, 2).reshape(b, -1, d))
        a, g = self.ffn_in(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.ffn_out(self.ffn_drop(a * F.relu(g)))


class FTTransformer(nn.Module):
    def __init__(self, n_num, cards, d=D, depth=3, heads=8, d_ffn=256, n_out=N_CLASSES):
        super().__init__()
        self.num_tok = NumericTokenizer(n_num, d)
        self.cat_tok = CategoricalTokenizer(cards, d)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * d**-0.5)
        self.blocks = nn.ModuleList(Block(d, heads, d_ffn, i == 0, i == depth - 1) for i in range(depth))
        self.head = nn.Sequential(nn.LayerNorm(d), nn.ReLU(), nn.Linear(d, n_out))

    def forward(self, x_num, x_cat):
        t = torch.cat([self.cls.expand(x_num.shape[0], -1, -1), self.num_tok(x_num), self.cat_tok(x_cat)], 1)
        for blk in self.blocks:
            t = blk(t)
        return self.head(t[:, 0])


def make_rows(n):
    x_num = torch.randn(n, N_NUM).pin_memory() if device == "cuda" else torch.randn(n, N_NUM)
    x_cat = torch.stack([torch.randint(0, c, (n,)) for c in CARDS], 1)
    y = torch.randint(0, N_CLASSES, (n,))
    if device == "cuda":
        x_cat, y = x_cat.pin_memory(), y.pin_memory()
    return (
        x_num.to(device, non_blocking=True),
        x_cat.to(device, non_blocking=True),
        y.to(device, non_blocking=True),
    )


model = FTTransformer(N_NUM, CARDS).to(device)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if ("norm" in name or "bias" in name or "tok" in name or "cls" in name) else decay).append(p)
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 1e-5}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, fused=amp
)
print(f"FT-Transformer params {sum(p.numel() for p in model.parameters())}")


def ft_step():
    x_num, x_cat, y = make_rows(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x_num, x_cat)
        loss = F.cross_entropy(logits, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {ft_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = ft_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
probs = []
x_num_all = torch.randn(EVAL_ROWS, N_NUM, device=device)
x_cat_all = torch.stack([torch.randint(0, c, (EVAL_ROWS,), device=device) for c in CARDS], 1)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for i in range(0, EVAL_ROWS, EVAL_CHUNK):
        logits = model(x_num_all[i : i + EVAL_CHUNK], x_cat_all[i : i + EVAL_CHUNK])
        probs.append(logits.float().softmax(-1).cpu())
probs = torch.cat(probs)
print(f"eval rows {probs.shape[0]} mean max prob {probs.max(-1).values.mean():.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class TabTransformer(nn.Module):
    def __init__(self, cards, n_num, d=32, depth=6, heads=8, n_out=N_CLASSES):
        super().__init__()
        self.register_buffer("offsets", torch.tensor([0, *np.cumsum(cards)[:-1].tolist()], dtype=torch.long))
        self.emb = nn.Embedding(sum(cards), d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.num_norm = nn.LayerNorm(n_num)
        self.mlp = nn.Sequential(
            nn.Linear(len(cards) * d + n_num, 1024),
            nn.ReLU(),
            nn.Linear(1024, 512),
            nn.ReLU(),
            nn.Linear(512, n_out),
        )

    def forward(self, x_num, x_cat):
        c = self.encoder(self.emb(x_cat + self.offsets)).flatten(1)
        return self.mlp(torch.cat([c, self.num_norm(x_num)], 1))


tt = TabTransformer(CARDS, N_NUM).to(device)
tt_opt = torch.optim.SGD(tt.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
tt.train()
for step in range(3):
    x_num, x_cat, y = make_rows(TT_B)
    loss = F.cross_entropy(tt(x_num, x_cat), y)
    tt_opt.zero_grad()
    loss.backward()
    tt_opt.step()
    print(f"tabtransformer step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"tabtransformer allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
