"""SAINT (Somepalli et al. 2021) written by hand, as in the authors' code: self-attention over the
columns of each row followed by intersample attention, where the rows of the batch attend to one another
(each row's 41 tokens x 64 dims flattened to one 2,624-wide token, the batch a sequence of length B).

Inputs: 30 numeric features, each embedded by its own small MLP (1 -> 100 -> 64, ReLU; written as batched
einsums over per-feature weights), 10 categorical features (cardinalities 2 .. 200) through one embedding
table with offsets, and a CLS token: 41 tokens of width 64. Four SAINT layers: pre-norm column attention
(8 heads of 16 via F.scaled_dot_product_attention) + GEGLU feed-forward, then pre-norm intersample attention
(8 heads of 64 over the 2,624-wide row tokens, projected down and back) + GEGLU feed-forward of the row
tokens. fp16 autocast with torch.amp.GradScaler, AdamW (lr 1e-4), batch 4,096 rows on the device.

Phases: the first self-supervised pretraining step (CutMix of the raw inputs with p = 0.3 against a shuffled
batch, mixup of the embeddings with lambda = 0.8, InfoNCE between the CLS projections of the clean and the
augmented views at temperature 0.7, plus denoising: MLP heads reconstructing each numeric value and each
category from the augmented view's tokens); 2 more pretraining steps; 3 supervised finetuning steps of the
CLS head (binary cross-entropy); then evaluation of 32,768 rows in batches of 4,096 under
torch.inference_mode and fp16 autocast, the probabilities moved to the host. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19203)
if SMALL:
    B, PRE_STEPS, FT_STEPS, EVAL_ROWS = 64, 1, 1, 128
else:
    B, PRE_STEPS, FT_STEPS, EVAL_ROWS = 4096, 2, 3, 32768
N_NUM = 30
CARDS = [2, 3, 5, 8, 12, 20, 40, 64, 100, 200]
N_TOK = 1 + N_NUM + len(CARDS)
D = 64
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class GEGLUFF(nn.Module):
    def __init__(self, d, mult=4):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.proj = nn.Linear(d, d * mult * 2)
        self.out = nn.Linear(d * mult, d)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        a, g = self.proj(self.norm(x)).chunk(2, dim=-1)
        return x + self.out(self.drop(a * F.gelu(g)))


class Attention(nn.Module):
    def __init__(self, d, heads, dim_head):
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * heads * dim_head, bias=False)
        self.out = nn.Linear(heads * dim_head, d)

    def forward(self, x):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, n, 3, self.heads, self.dim_head).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        return x + self.out(o.transpose(1, 2).reshape(b, n, -1))


class SAINTLayer(nn.Module):
    def __init__(self, d, n_tok):
        super().__init__()
        self.col_attn = Attention(d, 8, 16)
        self.col_ff = GEGLUFF(d)
        self.row_attn = Attention(d * n_tok, 8, 64)
        self.row_ff = GEGLUFF(d * n_tok, mult=1)

    def forward(self, x):
        b, n, d = x.shape
        x = self.col_ff(self.col_attn(x))
        r = x.reshape(1, b, n * d)
        r = self.row_ff(self.row_attn(r))
        return r.reshape(b, n, d)


class SAINT(nn.Module):
    def __init__(self, depth=4):
        super().__init__()
        self.num_w1 = nn.Parameter(torch.randn(N_NUM, 100) * 0.5)
        self.num_b1 = nn.Parameter(torch.zeros(N_NUM, 100))
        self.num_w2 = nn.Parameter(torch.randn(N_NUM, 100, D) * 0.1)
        self.num_b2 = nn.Parameter(torch.zeros(N_NUM, D))
        self.register_buffer("offsets", torch.cumsum(torch.tensor([0, *CARDS[:-1]]), 0))
        self.cat_emb = nn.Embedding(sum(CARDS), D)
        self.cls = nn.Parameter(torch.randn(1, 1, D) * 0.02)
        self.layers = nn.ModuleList(SAINTLayer(D, N_TOK) for _ in range(depth))
        self.proj_clean = nn.Sequential(nn.Linear(D, 256), nn.ReLU(), nn.Linear(256, 128))
        self.proj_aug = nn.Sequential(nn.Linear(D, 256), nn.ReLU(), nn.Linear(256, 128))
        self.num_heads_w1 = nn.Parameter(torch.randn(N_NUM, D, 32) * 0.1)
        self.num_heads_w2 = nn.Parameter(torch.randn(N_NUM, 32) * 0.1)
        self.cat_heads = nn.ModuleList(nn.Linear(D, c) for c in CARDS)
        self.head = nn.Sequential(nn.LayerNorm(D), nn.Linear(D, 1))

    def embed(self, x_num, x_cat):
        h = F.relu(x_num[..., None] * self.num_w1 + self.num_b1)
        e_num = torch.einsum("bnh,nhd->bnd", h, self.num_w2) + self.num_b2
        e_cat = self.cat_emb(x_cat + self.offsets)
        return torch.cat([e_num, e_cat], 1)

    def encode(self, e):
        x = torch.cat([self.cls.expand(e.shape[0], -1, -1), e], 1)
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, x_num, x_cat):
        return self.head(self.encode(self.embed(x_num, x_cat))[:, 0]).squeeze(-1)


def rows(n):
    x_num = torch.randn(n, N_NUM, device=device)
    x_cat = torch.stack([torch.randint(0, c, (n,), device=device) for c in CARDS], 1)
    y = (x_num[:, 0] + x_num[:, 1] * x_num[:, 2] > 0).float()
    return x_num, x_cat, y


model = SAINT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"SAINT params {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")


def pretrain_step():
    x_num, x_cat, _ = rows(B)
    perm = torch.randperm(B, device=device)
    mask_num = torch.rand(B, N_NUM, device=device) < 0.3
    mask_cat = torch.rand(B, len(CARDS), device=device) < 0.3
    aug_num = torch.where(mask_num, x_num[perm], x_num)
    aug_cat = torch.where(mask_cat, x_cat[perm], x_cat)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        e_clean = model.embed(x_num, x_cat)
        e_aug = model.embed(aug_num, aug_cat)
        e_aug = 0.8 * e_aug + 0.2 * e_aug[perm]
        h_clean = model.encode(e_clean)
        h_aug = model.encode(e_aug)
        z1 = F.normalize(model.proj_clean(h_clean[:, 0]).float(), dim=-1)
        z2 = F.normalize(model.proj_aug(h_aug[:, 0]).float(), dim=-1)
        logits = z1 @ z2.t() / 0.7
        target = torch.arange(B, device=device)
        l_con = (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target)) / 2
        tok = h_aug[:, 1 : 1 + N_NUM]
        rec_num = torch.einsum("bnd,ndh->bnh", tok, model.num_heads_w1).relu()
        rec_num = (rec_num * model.num_heads_w2).sum(-1)
        l_num = F.mse_loss(rec_num.float(), x_num)
        l_cat = sum(
            F.cross_entropy(head(h_aug[:, 1 + N_NUM + j]).float(), x_cat[:, j])
            for j, head in enumerate(model.cat_heads)
        )
        loss = l_con + 10 * l_num + l_cat
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()


model.train()
print(f"pretrain step 0 loss {pretrain_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(PRE_STEPS):
    loss = pretrain_step()
print(f"pretrain step {PRE_STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"pretrain peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(FT_STEPS):
    x_num, x_cat, y = rows(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = F.binary_cross_entropy_with_logits(model(x_num, x_cat).float(), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    print(f"finetune step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"finetune peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
probs = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for _ in range(EVAL_ROWS // B):
        x_num, x_cat, _ = rows(B)
        probs.append(torch.sigmoid(model(x_num, x_cat).float()).cpu())
probs = torch.cat(probs)
print(f"eval rows {probs.numel()} mean prob {probs.mean():.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
