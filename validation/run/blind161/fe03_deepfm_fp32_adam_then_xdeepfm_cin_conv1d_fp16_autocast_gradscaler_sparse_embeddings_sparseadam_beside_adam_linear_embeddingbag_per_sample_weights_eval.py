"""DeepFM and then xDeepFM as DeepCTR-Torch-style code writes them, on random Avazu-shaped data: 22
categorical fields with Avazu's vocabularies floored at 1,000 and capped at 3,000,000 (5,733,319
rows in all), each field its own embedding of 32, a first-order part (a per-field nn.Embedding of
width 1) and the dense part. DeepFM first: dense nn.Embedding tables, the FM term as 0.5 * ((sum
e)^2 - sum e^2), a DNN 704-400-400-400-1; fp32, Adam (lr 1e-3), batch 4,096, 2 steps. Then the
DeepFM dropped (del, gc.collect(), torch.cuda.empty_cache()) and an xDeepFM built: sparse=True
nn.Embedding tables for the fields, the linear part as one nn.EmbeddingBag(sum_of_vocabularies, 1,
mode="sum", sparse=True) over the 22 globally-offset ids with per_sample_weights (a field-importance
weight per id), a CIN of 3 layers (200, 200, 200 feature maps, split_half) computing each layer's
outer product by einsum('bhd,bmd->bhmd'), a reshape to (B, H*m, D) and nn.Conv1d(kernel_size=1),
beside a DNN 704-400-400; fp16 autocast with torch.cuda.amp.GradScaler, SparseAdam (lr 1e-3) for the
sparse tables and Adam for the rest, both stepped through the scaler, batch 4,096, 2 steps; then
evaluation at batch 32,768 under no_grad with log-loss; 6 phases."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16103)
VOCABS = [
    7, 7, 4737, 7745, 26, 8552, 559, 36, 2686408, 6729486, 8251, 5, 4, 2626, 8, 9, 435, 4, 68, 172,
    4, 60,
]  # fmt: skip
if SMALL:
    CAP, D, B, EVAL_B, HIDDEN, CIN_SIZES = 500, 4, 32, 64, [16, 16], [8, 8, 8]
else:
    CAP, D, B, EVAL_B, HIDDEN, CIN_SIZES = 3_000_000, 32, 4096, 32768, [400, 400, 400], [200, 200, 200]
VOCABS = [max(min(v, CAP), 1000) for v in VOCABS]
F_ = len(VOCABS)
device = "cuda" if torch.cuda.is_available() else "cpu"


def batch(n):
    x = torch.stack([torch.randint(0, v, (n,), device=device) for v in VOCABS], 1)
    y = (torch.rand(n, device=device) < 0.17).float()
    return x, y


class DNN(nn.Module):
    def __init__(self, d_in, hidden, dropout=0.0):
        super().__init__()
        layers = []
        for h in hidden:
            layers += [nn.Linear(d_in, h), nn.ReLU(), nn.Dropout(dropout)]
            d_in = h
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class DeepFM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_dict = nn.ModuleList([nn.Embedding(v, D) for v in VOCABS])
        self.linear_dict = nn.ModuleList([nn.Embedding(v, 1) for v in VOCABS])
        for e in self.embedding_dict:
            nn.init.normal_(e.weight, std=1e-4)
        self.dnn = DNN(F_ * D, HIDDEN)
        self.dnn_linear = nn.Linear(HIDDEN[-1], 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        emb = torch.stack([e(x[:, i]) for i, e in enumerate(self.embedding_dict)], 1)  # (B, F, D)
        linear = torch.cat([e(x[:, i]) for i, e in enumerate(self.linear_dict)], 1).sum(1, keepdim=True)
        square_of_sum = torch.pow(torch.sum(emb, dim=1, keepdim=True), 2)
        sum_of_square = torch.sum(emb * emb, dim=1, keepdim=True)
        fm = 0.5 * torch.sum(square_of_sum - sum_of_square, dim=2).squeeze(1).unsqueeze(1)
        dnn = self.dnn_linear(self.dnn(emb.flatten(1)))
        return torch.sigmoid(linear + fm + dnn + self.bias)


class CIN(nn.Module):
    def __init__(self, field_size, layer_size=(128, 128), split_half=True):
        super().__init__()
        self.layer_size, self.split_half = layer_size, split_half
        self.field_nums = [field_size]
        self.conv1ds = nn.ModuleList()
        for i, size in enumerate(layer_size):
            self.conv1ds.append(nn.Conv1d(self.field_nums[-1] * self.field_nums[0], size, 1))
            if split_half and i != len(layer_size) - 1:
                self.field_nums.append(size // 2)
            else:
                self.field_nums.append(size)

    def forward(self, inputs):
        batch_size, dim = inputs.shape[0], inputs.shape[-1]
        hidden_nn_layers = [inputs]
        final_result = []
        for i, size in enumerate(self.layer_size):
            x = torch.einsum("bhd,bmd->bhmd", hidden_nn_layers[-1], hidden_nn_layers[0])
            x = x.reshape(batch_size, hidden_nn_layers[-1].shape[1] * hidden_nn_layers[0].shape[1], dim)
            x = F.relu(self.conv1ds[i](x))
            if self.split_half and i != len(self.layer_size) - 1:
                next_hidden, direct_connect = torch.split(x, 2 * [size // 2], 1)
            else:
                direct_connect, next_hidden = x, 0
            final_result.append(direct_connect)
            hidden_nn_layers.append(next_hidden)
        result = torch.cat(final_result, dim=1)
        return torch.sum(result, -1)


class xDeepFM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding_dict = nn.ModuleList([nn.Embedding(v, D, sparse=True) for v in VOCABS])
        for e in self.embedding_dict:
            nn.init.normal_(e.weight, std=1e-4)
        self.linear = nn.EmbeddingBag(sum(VOCABS), 1, mode="sum", sparse=True)
        nn.init.zeros_(self.linear.weight)
        self.register_buffer("field_offsets", torch.tensor([0, *VOCABS[:-1]]).cumsum(0))
        self.field_weight = nn.Parameter(torch.ones(F_))
        self.cin = CIN(F_, CIN_SIZES)
        cin_out = sum(CIN_SIZES[:-1]) // 2 + CIN_SIZES[-1]
        self.cin_linear = nn.Linear(cin_out, 1, bias=False)
        self.dnn = DNN(F_ * D, HIDDEN[:2])
        self.dnn_linear = nn.Linear(HIDDEN[1], 1, bias=False)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        emb = torch.stack([e(x[:, i]) for i, e in enumerate(self.embedding_dict)], 1)
        flat_ids = (x + self.field_offsets).flatten()
        offsets = torch.arange(0, flat_ids.numel(), F_, device=x.device)
        psw = self.field_weight.repeat(x.shape[0])
        linear = self.linear(flat_ids, offsets, per_sample_weights=psw)
        cin = self.cin_linear(self.cin(emb))
        dnn = self.dnn_linear(self.dnn(emb.flatten(1)))
        return linear + cin + dnn + self.bias


def report(tag, extra=""):
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"{tag} {extra} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = DeepFM().to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
report("deepfm built", torch.cuda.memory_allocated() if device == "cuda" else "")
model.train()
for _ in range(2):
    x, y = batch(B)
    loss = F.binary_cross_entropy(model(x).squeeze(1), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
report("deepfm trained", f"loss {loss.item():.4f}")

del model, optimizer, x, y, loss
gc.collect()
if device == "cuda":
    torch.cuda.empty_cache()

model = xDeepFM().to(device)
sparse_params = [p for n, p in model.named_parameters() if n.startswith(("embedding_dict", "linear."))]
dense_params = [p for n, p in model.named_parameters() if not n.startswith(("embedding_dict", "linear."))]
opt_sparse = torch.optim.SparseAdam(sparse_params, lr=1e-3)
opt_dense = torch.optim.Adam(dense_params, lr=1e-3)
scaler = torch.cuda.amp.GradScaler(enabled=device == "cuda")
report("xdeepfm built", torch.cuda.memory_allocated() if device == "cuda" else "")
model.train()
for step in range(2):
    x, y = batch(B)
    opt_sparse.zero_grad()
    opt_dense.zero_grad()
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
        logit = model(x).squeeze(1)
        loss = F.binary_cross_entropy_with_logits(logit.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt_sparse)
    scaler.step(opt_dense)
    scaler.update()
    report(f"xdeepfm step {step}", f"loss {loss.item():.4f}")

del x, y, logit, loss
model.eval()
total, n = 0.0, 0
with torch.no_grad():
    for _ in range(2):
        x, y = batch(EVAL_B)
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
            p = torch.sigmoid(model(x).squeeze(1).float())
        total += F.binary_cross_entropy(p, y, reduction="sum").item()
        n += y.numel()
if device == "cuda":
    print(
        f"eval logloss {total / n:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
