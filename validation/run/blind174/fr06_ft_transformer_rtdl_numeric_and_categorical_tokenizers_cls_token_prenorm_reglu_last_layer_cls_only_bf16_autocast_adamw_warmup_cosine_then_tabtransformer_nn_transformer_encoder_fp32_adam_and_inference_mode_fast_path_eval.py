"""FT-Transformer after Gorishniy et al. 2021 and the yandex-research/rtdl package, then TabTransformer
after Huang et al. 2020 (lucidrains/tab-transformer-pytorch's layout), written by hand on a
Covertype-plus-categoricals-shaped table (24 numeric features and 12 categorical columns of
cardinalities 2 to 1,000; 7 classes). FT-Transformer: NumericalFeatureTokenizer (x[..., None] *
weight + bias), CategoricalFeatureTokenizer (one nn.Embedding over all columns with the category
offsets as a buffer, plus a bias), the [CLS] token appended last; 4 pre-norm blocks of d_token 192
(the first without the attention LayerNorm), rtdl's MultiheadAttention by hand (8 heads, W_q / W_k /
W_v / W_out, heads folded into the batch, attention dropout 0.2), the ReGLU feed-forward of 256
(chunk, a * relu(b)), ffn dropout 0.1, the last block computing queries for the [CLS] token only; the
head LayerNorm, ReLU, Linear. bf16 autocast, AdamW (lr 1e-4, weight decay 1e-5 except tokenizers,
norms and biases: two parameter groups) with linear warmup then cosine decay by LambdaLR, cross
entropy; batch 4,096; the first step its own phase, then 3 steps; then evaluation of 32,768 rows in
batches of 16,384 under inference_mode and bf16 autocast (logits gathered, accuracy). TabTransformer:
column embeddings (dim 32, an offset buffer), an nn.TransformerEncoder of 6 nn.TransformerEncoderLayer
(8 heads, feed-forward 128, GELU, batch_first, dropout 0.1) over the 12 categorical tokens, the
numeric features through LayerNorm, the flattened tokens concatenated with them into an MLP
(4 x and 2 x the input with ReLU); fp32, Adam (lr 1e-3), 3 steps at batch 8,192; then evaluation of
65,536 rows in batches of 16,384 under inference_mode (model.eval(): nn.TransformerEncoderLayer's
fast path); 5 phases."""

import itertools
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17406)
CARDS = [2, 4, 7, 12, 24, 31, 40, 53, 100, 250, 500, 1000]
N_NUM, N_CLASSES = 24, 7
if SMALL:
    D, BLOCKS, HEADS, FFN, B, STEPS, EVAL_N, EVAL_B, TT_B, TT_EVAL_N = 16, 2, 4, 16, 32, 2, 64, 32, 32, 64
else:
    D, BLOCKS, HEADS, FFN, B, STEPS, EVAL_N, EVAL_B, TT_B, TT_EVAL_N = (
        192,
        4,
        8,
        256,
        4096,
        4,
        32768,
        16384,
        8192,
        65536,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def table(n):
    x_num = torch.randn(n, N_NUM, device=device)
    x_cat = torch.stack([torch.randint(0, c, (n,), device=device) for c in CARDS], dim=1)
    logits = x_num[:, :N_CLASSES] + 0.5 * (x_cat[:, :N_CLASSES] % 3).float()
    y = logits.argmax(dim=1)
    return x_num, x_cat, y


class NumericalFeatureTokenizer(nn.Module):
    def __init__(self, n_features, d_token):
        super().__init__()
        s = 1 / math.sqrt(d_token)
        self.weight = nn.Parameter(torch.empty(n_features, d_token).uniform_(-s, s))
        self.bias = nn.Parameter(torch.empty(n_features, d_token).uniform_(-s, s))

    def forward(self, x):
        return self.weight[None] * x[..., None] + self.bias[None]


class CategoricalFeatureTokenizer(nn.Module):
    def __init__(self, cardinalities, d_token):
        super().__init__()
        category_offsets = torch.tensor([0, *cardinalities[:-1]]).cumsum(0)
        self.register_buffer("category_offsets", category_offsets, persistent=False)
        s = 1 / math.sqrt(d_token)
        self.embeddings = nn.Embedding(sum(cardinalities), d_token)
        nn.init.uniform_(self.embeddings.weight, -s, s)
        self.bias = nn.Parameter(torch.empty(len(cardinalities), d_token).uniform_(-s, s))

    def forward(self, x):
        return self.embeddings(x + self.category_offsets[None]) + self.bias[None]


class MultiheadAttention(nn.Module):
    def __init__(self, d_token, n_heads, dropout):
        super().__init__()
        self.W_q = nn.Linear(d_token, d_token)
        self.W_k = nn.Linear(d_token, d_token)
        self.W_v = nn.Linear(d_token, d_token)
        self.W_out = nn.Linear(d_token, d_token)
        self.n_heads = n_heads
        self.dropout = nn.Dropout(dropout)

    def _reshape(self, x):
        batch_size, n_tokens, d = x.shape
        d_head = d // self.n_heads
        return (
            x.reshape(batch_size, n_tokens, self.n_heads, d_head)
            .transpose(1, 2)
            .reshape(batch_size * self.n_heads, n_tokens, d_head)
        )

    def forward(self, x_q, x_kv):
        q, k, v = self.W_q(x_q), self.W_k(x_kv), self.W_v(x_kv)
        batch_size = len(q)
        d_head_key = k.shape[-1] // self.n_heads
        d_head_value = v.shape[-1] // self.n_heads
        n_q_tokens = q.shape[1]
        q, k = self._reshape(q), self._reshape(k)
        attention_logits = q @ k.transpose(1, 2) / math.sqrt(d_head_key)
        attention_probs = F.softmax(attention_logits, dim=-1)
        attention_probs = self.dropout(attention_probs)
        x = attention_probs @ self._reshape(v)
        x = (
            x.reshape(batch_size, self.n_heads, n_q_tokens, d_head_value)
            .transpose(1, 2)
            .reshape(batch_size, n_q_tokens, self.n_heads * d_head_value)
        )
        return self.W_out(x)


class ReGLU(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return a * F.relu(b)


class FTBlock(nn.Module):
    def __init__(self, first):
        super().__init__()
        self.attention = MultiheadAttention(D, HEADS, 0.2)
        self.attention_normalization = None if first else nn.LayerNorm(D)
        self.ffn_normalization = nn.LayerNorm(D)
        self.ffn = nn.Sequential(nn.Linear(D, 2 * FFN), ReGLU(), nn.Dropout(0.1), nn.Linear(FFN, D))
        self.attention_residual_dropout = nn.Dropout(0.0)
        self.ffn_residual_dropout = nn.Dropout(0.0)


class FTTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.num_tokenizer = NumericalFeatureTokenizer(N_NUM, D)
        self.cat_tokenizer = CategoricalFeatureTokenizer(CARDS, D)
        s = 1 / math.sqrt(D)
        self.cls_weight = nn.Parameter(torch.empty(D).uniform_(-s, s))
        self.blocks = nn.ModuleList([FTBlock(i == 0) for i in range(BLOCKS)])
        self.head = nn.Sequential(nn.LayerNorm(D), nn.ReLU(), nn.Linear(D, N_CLASSES))

    def forward(self, x_num, x_cat):
        x = torch.cat([self.num_tokenizer(x_num), self.cat_tokenizer(x_cat)], dim=1)
        x = torch.cat([x, self.cls_weight.view(1, 1, -1).expand(len(x), 1, -1)], dim=1)
        for i, block in enumerate(self.blocks):
            x_residual = x if block.attention_normalization is None else block.attention_normalization(x)
            if i + 1 == len(self.blocks):
                x_residual = block.attention(x_residual[:, -1:], x_residual)
                x = x[:, -1:]
            else:
                x_residual = block.attention(x_residual, x_residual)
            x = x + block.attention_residual_dropout(x_residual)
            x_residual = block.ffn(block.ffn_normalization(x))
            x = x + block.ffn_residual_dropout(x_residual)
        return self.head(x[:, -1])


ft = FTTransformer().to(device)
no_wd = [
    p
    for n, p in ft.named_parameters()
    if "tokenizer" in n or "normalization" in n or ".bias" in n or "cls" in n or "head.0" in n
]
no_wd_ids = {id(p) for p in no_wd}
wd = [p for p in ft.parameters() if id(p) not in no_wd_ids]
optimizer = torch.optim.AdamW(
    [{"params": wd}, {"params": no_wd, "weight_decay": 0.0}], lr=1e-4, weight_decay=1e-5
)
TOTAL, WARMUP = 100, 5
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer,
    lambda s: (
        (s + 1) / WARMUP if s < WARMUP else 0.5 * (1 + math.cos(math.pi * (s - WARMUP) / (TOTAL - WARMUP)))
    ),
)
print(f"ft params {sum(p.numel() for p in ft.parameters())} tokens {N_NUM + len(CARDS) + 1}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ft.train()
for step in range(STEPS):
    x_num, x_cat, y = table(B)
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = F.cross_entropy(ft(x_num, x_cat), y)
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"ft step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del loss, x_num, x_cat, y
if device == "cuda":
    print(f"ft train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ft.eval()
with torch.inference_mode():
    x_num, x_cat, y = table(EVAL_N)
    logits = []
    for i in range(0, EVAL_N, EVAL_B):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits.append(ft(x_num[i : i + EVAL_B], x_cat[i : i + EVAL_B]).float())
    logits = torch.cat(logits)
    acc = (logits.argmax(1) == y).float().mean()
print(f"ft eval acc {acc.item():.4f}")
del ft, optimizer, scheduler, logits, x_num, x_cat, y
if device == "cuda":
    print(f"ft eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class TabTransformer(nn.Module):
    def __init__(self, dim=32, depth=6, heads=8, mlp_hidden_mults=(4, 2)):
        super().__init__()
        self.register_buffer(
            "categories_offset", F.pad(torch.tensor(CARDS), (1, 0), value=0).cumsum(0)[:-1], persistent=False
        )
        self.category_embed = nn.Embedding(sum(CARDS), dim)
        layer = nn.TransformerEncoderLayer(
            dim, heads, dim_feedforward=4 * dim, dropout=0.1, activation="gelu", batch_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(N_NUM)
        input_size = dim * len(CARDS) + N_NUM
        hidden = [input_size * m for m in mlp_hidden_mults]
        dims = [input_size, *hidden, N_CLASSES]
        mlp = []
        for i, (a, b) in enumerate(itertools.pairwise(dims)):
            mlp.append(nn.Linear(a, b))
            if i < len(dims) - 2:
                mlp.append(nn.ReLU())
        self.mlp = nn.Sequential(*mlp)

    def forward(self, x_categ, x_cont):
        x = self.category_embed(x_categ + self.categories_offset)
        x = self.transformer(x)
        flat_categ = x.flatten(1)
        normed_cont = self.norm(x_cont)
        return self.mlp(torch.cat((flat_categ, normed_cont), dim=-1))


tt = TabTransformer().to(device)
tt_opt = torch.optim.Adam(tt.parameters(), lr=1e-3)
print(f"tab params {sum(p.numel() for p in tt.parameters())}")
tt.train()
for step in range(3):
    x_num, x_cat, y = table(TT_B)
    loss = F.cross_entropy(tt(x_cat, x_num), y)
    tt_opt.zero_grad()
    loss.backward()
    tt_opt.step()
    print(f"tab step {step} loss {loss.item():.4f}")
del loss, x_num, x_cat, y
if device == "cuda":
    print(f"tab train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

tt.eval()
with torch.inference_mode():
    x_num, x_cat, y = table(TT_EVAL_N)
    probs = torch.cat(
        [tt(x_cat[i : i + EVAL_B], x_num[i : i + EVAL_B]).softmax(-1) for i in range(0, TT_EVAL_N, EVAL_B)]
    )
    acc = (probs.argmax(1) == y).float().mean()
print(f"tab eval acc {acc.item():.4f} {tuple(probs.shape)}")
if device == "cuda":
    print(
        f"tab eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
