"""A DCN-v2 click model as users write it beside the paper (Wang et al. 2021): 39 raw categorical
ids per sample (random 64-bit-ish values) hashed by hand into one shared nn.Embedding of 20,000,000
buckets x 16 (1.28 GB fp32, dense gradient: sparse=False) with a per-field salt and a multiply-
xor-shift mix in int64 followed by a modulo, 13 dense features log-transformed and passed through
nn.Linear(13, 16) as a 40th field; x0 the 640-wide concatenation. Two cross towers over x0: a
stacked full-rank CrossNetV2 (3 layers x_{l+1} = x0 * (W_l x_l + b_l) + x_l with W_l 640 x 640)
followed by a deep MLP 640-1024-1024-512, and in parallel a low-rank mixture-of-experts cross
network (DCN-Mix: 2 layers, 4 experts of rank 64 with a tanh between U and V, a softmax gate over
the experts); the two towers' outputs concatenated into a logit. fp32 weights under bf16 autocast,
BCEWithLogitsLoss, AdamW (lr 1e-3, weight decay 1e-5 on the MLPs and cross weights, none on the
embedding table and biases), clip_grad_norm_ 10, batch 8,192, 3 steps (each its own phase), then an
evaluation under inference_mode over 4 batches of 32,768 with AUC computed by hand from argsort
ranks; 5 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16102)
if SMALL:
    BUCKETS, D, B, EVAL_B, EVAL_N, STEPS, DEEP = 10_000, 4, 64, 256, 2, 3, [32, 16]
else:
    BUCKETS, D, B, EVAL_B, EVAL_N, STEPS, DEEP = 20_000_000, 16, 8192, 32768, 4, 3, [1024, 1024, 512]
N_CAT, N_DENSE = 39, 13
device = "cuda" if torch.cuda.is_available() else "cpu"


def hash_ids(raw, salts, buckets):
    # raw: (B, F) int64 ids; a per-field salt then a multiply-xorshift mix, then modulo
    h = raw * 0x9E3779B1 + salts
    h = h ^ (h >> 16)
    h = h * 0x85EBCA6B
    h = h ^ (h >> 13)
    return torch.remainder(h, buckets)


class CrossNetV2(nn.Module):
    def __init__(self, dim, num_layers):
        super().__init__()
        self.kernels = nn.ModuleList([nn.Linear(dim, dim) for _ in range(num_layers)])

    def forward(self, x0):
        x = x0
        for layer in self.kernels:
            x = x0 * layer(x) + x
        return x


class CrossNetMix(nn.Module):
    def __init__(self, dim, num_layers=2, num_experts=4, low_rank=64):
        super().__init__()
        self.num_layers, self.num_experts = num_layers, num_experts
        self.U = nn.ParameterList(
            [
                nn.Parameter(nn.init.xavier_normal_(torch.empty(num_experts, dim, low_rank)))
                for _ in range(num_layers)
            ]
        )
        self.V = nn.ParameterList(
            [
                nn.Parameter(nn.init.xavier_normal_(torch.empty(num_experts, dim, low_rank)))
                for _ in range(num_layers)
            ]
        )
        self.C = nn.ParameterList(
            [
                nn.Parameter(nn.init.xavier_normal_(torch.empty(num_experts, low_rank, low_rank)))
                for _ in range(num_layers)
            ]
        )
        self.gating = nn.ModuleList([nn.Linear(dim, 1, bias=False) for _ in range(num_experts)])
        self.bias = nn.ParameterList([nn.Parameter(torch.zeros(dim, 1)) for _ in range(num_layers)])

    def forward(self, inputs):
        x_0 = inputs.unsqueeze(2)  # (bs, dim, 1)
        x_l = x_0
        for i in range(self.num_layers):
            output_of_experts, gating_score_of_experts = [], []
            for expert_id in range(self.num_experts):
                gating_score_of_experts.append(self.gating[expert_id](x_l.squeeze(2)))
                v_x = torch.matmul(self.V[i][expert_id].t(), x_l)  # (bs, low_rank, 1)
                v_x = torch.tanh(v_x)
                v_x = torch.matmul(self.C[i][expert_id], v_x)
                v_x = torch.tanh(v_x)
                uv_x = torch.matmul(self.U[i][expert_id], v_x)  # (bs, dim, 1)
                dot_ = uv_x + self.bias[i]
                dot_ = x_0 * dot_
                output_of_experts.append(dot_.squeeze(2))
            output_of_experts = torch.stack(output_of_experts, 2)  # (bs, dim, num_experts)
            gating_score_of_experts = torch.stack(gating_score_of_experts, 1)  # (bs, num_experts, 1)
            moe_out = torch.matmul(output_of_experts, gating_score_of_experts.softmax(1))
            x_l = moe_out + x_l
        return x_l.squeeze(2)


class DCNv2(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(BUCKETS, D)
        nn.init.normal_(self.embedding.weight, std=0.01)
        self.register_buffer("salts", torch.arange(N_CAT, dtype=torch.long) * 1_000_003 + 17)
        self.dense_proj = nn.Linear(N_DENSE, D)
        dim = (N_CAT + 1) * D
        self.cross = CrossNetV2(dim, 3)
        layers, d_in = [], dim
        for h in DEEP:
            layers += [nn.Linear(d_in, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(0.1)]
            d_in = h
        self.deep = nn.Sequential(*layers)
        self.mix = CrossNetMix(dim)
        self.head = nn.Linear(d_in + dim, 1)

    def forward(self, raw_cat, dense):
        idx = hash_ids(raw_cat, self.salts, BUCKETS)
        e = self.embedding(idx)  # (B, 39, D)
        d = self.dense_proj(torch.log1p(dense)).unsqueeze(1)
        x0 = torch.cat([e, d], 1).flatten(1)
        stacked = self.deep(self.cross(x0))
        parallel = self.mix(x0)
        return self.head(torch.cat([stacked, parallel], 1)).squeeze(1)


def batch(n):
    raw = torch.randint(0, 2**40, (n, N_CAT), device=device)
    dense = torch.rand(n, N_DENSE, device=device) * 100
    y = (torch.rand(n, device=device) < 0.2).float()
    return raw, dense, y


def auc(scores, labels):
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, device=scores.device, dtype=torch.float64)
    pos = labels.bool()
    n_pos = pos.sum()
    n_neg = len(labels) - n_pos
    return ((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)).item()


model = DCNv2().to(device)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if name.startswith("embedding") or name.endswith("bias") or p.ndim == 1 else decay).append(p)
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 1e-5}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-3
)
criterion = nn.BCEWithLogitsLoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    raw, dense, y = batch(B)
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        logits = model(raw, dense)
        loss = criterion(logits.float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    optimizer.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del raw, dense, y, logits, loss
model.eval()
all_scores, all_labels = [], []
with torch.inference_mode():
    for _ in range(EVAL_N):
        raw, dense, y = batch(EVAL_B)
        with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
            all_scores.append(torch.sigmoid(model(raw, dense).float()))
        all_labels.append(y)
    val_auc = auc(torch.cat(all_scores), torch.cat(all_labels))
if device == "cuda":
    print(
        f"eval auc {val_auc:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
