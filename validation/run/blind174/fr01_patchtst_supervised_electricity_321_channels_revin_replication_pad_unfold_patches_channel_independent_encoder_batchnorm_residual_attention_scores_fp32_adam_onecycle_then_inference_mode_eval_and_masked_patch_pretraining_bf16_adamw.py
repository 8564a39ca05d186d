"""PatchTST after Nie et al. 2023 ("A Time Series is Worth 64 Words") and the yuqinie98/PatchTST
repository's PatchTST_backbone, written by hand: supervised long-term forecasting on an
Electricity-shaped batch (321 channels, look-back 336, horizon 96), RevIN (affine, per-instance mean
and standard deviation), `padding_patch='end'` by nn.ReplicationPad1d((0, stride)) and patching by
`Tensor.unfold` (patch 16, stride 8: 42 patches), channel independence (the (B * 321) series share the
encoder), a learned positional encoding, 3 encoder layers of d_model 128, 16 heads and d_ff 256 with
the repository's residual attention (each layer's pre-softmax scores added to the next layer's),
BatchNorm1d between Transpose modules as the norm, GELU, dropout 0.2, and the flatten head
(Linear(128 * 42, 96)). fp32, Adam (lr 1e-4) with OneCycleLR (pct_start 0.3) stepped per batch as the
repository's `lradj='TST'` does, MSE; batch 32; the first step its own phase, then 3 steps; then
validation of 4 batches of 64 under inference_mode (MSE and MAE); then PatchTST's self-supervised
masked-patch pre-training (patch 12, stride 12, no padding, 40% of the patches masked per channel by
`torch.rand` noise, argsort and gather, a Linear(128, 12) pre-training head, the masked MSE) under
bf16 autocast with AdamW (lr 1e-3), 3 steps at batch 48; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17401)
if SMALL:
    B, NVARS, SEQ, PRED, D, HEADS, DFF, LAYERS, STEPS, EVAL_B, EVAL_N, PT_B = (
        2,
        3,
        64,
        16,
        16,
        4,
        32,
        2,
        2,
        2,
        1,
        2,
    )
else:
    B, NVARS, SEQ, PRED, D, HEADS, DFF, LAYERS, STEPS, EVAL_B, EVAL_N, PT_B = (
        32,
        321,
        336,
        96,
        128,
        16,
        256,
        3,
        4,
        64,
        4,
        48,
    )
PATCH, STRIDE = 16, 8
device = "cuda" if torch.cuda.is_available() else "cpu"


class RevIN(nn.Module):
    def __init__(self, num_features, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.affine_weight = nn.Parameter(torch.ones(num_features))
        self.affine_bias = nn.Parameter(torch.zeros(num_features))

    def forward(self, x, mode):
        if mode == "norm":
            self.mean = torch.mean(x, dim=1, keepdim=True).detach()
            self.stdev = torch.sqrt(torch.var(x, dim=1, keepdim=True, unbiased=False) + self.eps).detach()
            x = (x - self.mean) / self.stdev
            return x * self.affine_weight + self.affine_bias
        x = (x - self.affine_bias) / (self.affine_weight + self.eps * self.eps)
        return x * self.stdev + self.mean


class Transpose(nn.Module):
    def __init__(self, *dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return x.transpose(*self.dims)


class ScaledDotProductAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout=0.0):
        super().__init__()
        self.attn_dropout = nn.Dropout(attn_dropout)
        head_dim = d_model // n_heads
        self.scale = nn.Parameter(torch.tensor(head_dim**-0.5), requires_grad=False)

    def forward(self, q, k, v, prev=None):
        attn_scores = torch.matmul(q, k) * self.scale
        if prev is not None:
            attn_scores = attn_scores + prev
        attn_weights = F.softmax(attn_scores, dim=-1)
        attn_weights = self.attn_dropout(attn_weights)
        output = torch.matmul(attn_weights, v)
        return output, attn_weights, attn_scores


class MultiheadAttention(nn.Module):
    def __init__(self, d_model, n_heads, attn_dropout=0.0, proj_dropout=0.0):
        super().__init__()
        d_k = d_v = d_model // n_heads
        self.n_heads, self.d_k, self.d_v = n_heads, d_k, d_v
        self.W_Q = nn.Linear(d_model, d_k * n_heads)
        self.W_K = nn.Linear(d_model, d_k * n_heads)
        self.W_V = nn.Linear(d_model, d_v * n_heads)
        self.sdp_attn = ScaledDotProductAttention(d_model, n_heads, attn_dropout)
        self.to_out = nn.Sequential(nn.Linear(n_heads * d_v, d_model), nn.Dropout(proj_dropout))

    def forward(self, Q, prev=None):
        bs = Q.size(0)
        q_s = self.W_Q(Q).view(bs, -1, self.n_heads, self.d_k).transpose(1, 2)
        k_s = self.W_K(Q).view(bs, -1, self.n_heads, self.d_k).permute(0, 2, 3, 1)
        v_s = self.W_V(Q).view(bs, -1, self.n_heads, self.d_v).transpose(1, 2)
        output, attn_weights, attn_scores = self.sdp_attn(q_s, k_s, v_s, prev=prev)
        output = output.transpose(1, 2).contiguous().view(bs, -1, self.n_heads * self.d_v)
        return self.to_out(output), attn_weights, attn_scores


class TSTEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.2):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, n_heads, attn_dropout=0.0, proj_dropout=dropout)
        self.dropout_attn = nn.Dropout(dropout)
        self.norm_attn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )
        self.dropout_ffn = nn.Dropout(dropout)
        self.norm_ffn = nn.Sequential(Transpose(1, 2), nn.BatchNorm1d(d_model), Transpose(1, 2))

    def forward(self, src, prev=None):
        src2, _attn, scores = self.self_attn(src, prev=prev)
        src = src + self.dropout_attn(src2)
        src = self.norm_attn(src)
        src2 = self.ff(src)
        src = src + self.dropout_ffn(src2)
        src = self.norm_ffn(src)
        return src, scores


class PatchTST(nn.Module):
    def __init__(self, c_in, context_window, target_window, patch_len, stride, pad_end=True, pretrain=False):
        super().__init__()
        self.patch_len, self.stride, self.pretrain = patch_len, stride, pretrain
        patch_num = int((context_window - patch_len) / stride + 1)
        self.padding_patch_layer = nn.ReplicationPad1d((0, stride)) if pad_end else None
        if pad_end:
            patch_num += 1
        self.patch_num = patch_num
        self.revin_layer = RevIN(c_in)
        self.W_P = nn.Linear(patch_len, D)
        self.W_pos = nn.Parameter(torch.empty(patch_num, D).uniform_(-0.02, 0.02))
        self.dropout = nn.Dropout(0.2)
        self.layers = nn.ModuleList([TSTEncoderLayer(D, HEADS, DFF) for _ in range(LAYERS)])
        if pretrain:
            self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(D, patch_len))
        else:
            self.head = nn.Sequential(
                nn.Flatten(start_dim=-2), nn.Linear(D * patch_num, target_window), nn.Dropout(0.0)
            )

    def patchify(self, z):  # z: [bs, nvars, seq_len]
        if self.padding_patch_layer is not None:
            z = self.padding_patch_layer(z)
        return z.unfold(
            dimension=-1, size=self.patch_len, step=self.stride
        )  # [bs, nvars, patch_num, patch_len]

    def encode(self, x):  # x: [bs, nvars, patch_num, patch_len]
        n_vars = x.shape[1]
        x = self.W_P(x)
        u = torch.reshape(x, (x.shape[0] * x.shape[1], x.shape[2], x.shape[3]))
        z = self.dropout(u + self.W_pos)
        scores = None
        for mod in self.layers:
            z, scores = mod(z, prev=scores)
        return torch.reshape(z, (-1, n_vars, z.shape[-2], z.shape[-1]))  # [bs, nvars, patch_num, d_model]

    def forward(self, x):  # x: [bs, seq_len, nvars]
        x = self.revin_layer(x, "norm")
        z = self.patchify(x.permute(0, 2, 1))
        z = self.encode(z).permute(0, 1, 3, 2)  # [bs, nvars, d_model, patch_num]
        z = self.head(z)  # [bs, nvars, target_window]
        return self.revin_layer(z.permute(0, 2, 1), "denorm")


def batch(bs, seq, pred):
    t = torch.arange(seq + pred, device=device, dtype=torch.float32)
    phase = torch.rand(bs, 1, NVARS, device=device) * 6.283
    level = torch.rand(bs, 1, NVARS, device=device) * 10
    series = (
        level
        + torch.sin(t[None, :, None] * 0.2618 + phase)
        + 0.3 * torch.randn(bs, seq + pred, NVARS, device=device)
    )
    return series[:, :seq], series[:, seq:]


model = PatchTST(NVARS, SEQ, PRED, PATCH, STRIDE).to(device)
print(f"params {sum(p.numel() for p in model.parameters())} patches {model.patch_num}")
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-4, total_steps=STEPS, pct_start=0.3)
criterion = nn.MSELoss()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    batch_x, batch_y = batch(B, SEQ, PRED)
    optimizer.zero_grad()
    outputs = model(batch_x)
    loss = criterion(outputs, batch_y)
    loss.backward()
    optimizer.step()
    scheduler.step()
    print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del batch_x, batch_y, outputs, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
preds, trues = [], []
with torch.inference_mode():
    for _ in range(EVAL_N):
        batch_x, batch_y = batch(EVAL_B, SEQ, PRED)
        outputs = model(batch_x)
        preds.append(outputs)
        trues.append(batch_y)
    preds, trues = torch.cat(preds), torch.cat(trues)
    mse = F.mse_loss(preds, trues)
    mae = (preds - trues).abs().mean()
print(f"eval mse {mse.item():.4f} mae {mae.item():.4f} {tuple(preds.shape)}")
del preds, trues, batch_x, batch_y, outputs
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, scheduler
PT_PATCH = 12
pt = PatchTST(NVARS, SEQ, PRED, PT_PATCH, PT_PATCH, pad_end=False, pretrain=True).to(device)
pt_opt = torch.optim.AdamW(pt.parameters(), lr=1e-3, weight_decay=0.01)


def random_masking(xb, mask_ratio=0.4):
    bs, L, nvars, d = xb.shape
    x = xb.clone()
    len_keep = int(L * (1 - mask_ratio))
    noise = torch.rand(bs, L, nvars, device=xb.device)
    ids_shuffle = torch.argsort(noise, dim=1)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    ids_keep = ids_shuffle[:, :len_keep, :]
    x_kept = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, 1, d))
    x_removed = torch.zeros(bs, L - len_keep, nvars, d, device=xb.device)
    x_ = torch.cat([x_kept, x_removed], dim=1)
    x_masked = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, 1, d))
    mask = torch.ones([bs, L, nvars], device=x.device)
    mask[:, :len_keep, :] = 0
    mask = torch.gather(mask, dim=1, index=ids_restore)
    return x_masked, x_kept, mask, ids_restore


pt.train()
for step in range(3):
    batch_x, _ = batch(PT_B, SEQ, 0)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        x = pt.revin_layer(batch_x, "norm")
        patches = pt.patchify(x.permute(0, 2, 1))  # [bs, nvars, L, patch]
        target = patches.permute(0, 2, 1, 3)  # [bs, L, nvars, patch]
        x_masked, _, mask, _ = random_masking(target)
        z = pt.encode(x_masked.permute(0, 2, 1, 3))  # [bs, nvars, L, d]
        pred = pt.head(z).permute(0, 2, 1, 3)  # [bs, L, nvars, patch]
        loss = ((pred.float() - target) ** 2).mean(dim=-1)
        loss = (loss * mask).sum() / mask.sum()
    pt_opt.zero_grad(set_to_none=True)
    loss.backward()
    pt_opt.step()
    print(f"pretrain step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"pretrain allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
