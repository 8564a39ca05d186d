"""PatchTST written by hand (Nie et al. 2023) with RevIN: each of 862 traffic-like series normalised by its
own mean and std (with learnable affine weights per channel), channel-independent batching (B x C
sequences), patches cut by Tensor.unfold (patch 16, stride 8, the end padded by ReplicationPad1d), a linear
patch embedding with a learned positional embedding, 3 pre-norm Transformer layers (d_model 128, 8 heads by
F.scaled_dot_product_attention with no mask, GELU FFN 256, LayerNorm), a flatten head to the
horizon, RevIN denormalisation. Phases: 5 steps of fused AdamW under fp16 autocast with GradScaler at batch
16 (16 x 862 sequences), horizon 96, clip 1.0 after unscale_; inference_mode evaluation at batch 48 (MSE
and MAE); then a horizon-720 model (new head) trained 4 steps under bf16 autocast with every encoder layer
under non-reentrant torch.utils.checkpoint at batch 24. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2292)
device = "cuda"
C, L, P, S = 862, 336, 16, 8


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class RevIN(nn.Module):
    def __init__(self, channels, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def norm(self, x):  # x: [B, L, C]
        self.mean = x.mean(dim=1, keepdim=True).detach()
        self.std = torch.sqrt(x.var(dim=1, keepdim=True, unbiased=False) + self.eps).detach()
        x = (x - self.mean) / self.std
        return x * self.weight + self.bias

    def denorm(self, y):
        y = (y - self.bias) / (self.weight + self.eps * self.eps)
        return y * self.std + self.mean


class EncoderLayer(nn.Module):
    def __init__(self, d, heads, ffn, dropout=0.2):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Dropout(dropout), nn.Linear(ffn, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        n, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(n, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(n, t, d)))
        return x + self.drop(self.ff(self.ln2(x)))


class PatchTST(nn.Module):
    def __init__(self, horizon, d=128, heads=8, layers=3, ffn=256):
        super().__init__()
        self.revin = RevIN(C)
        self.pad = nn.ReplicationPad1d((0, S))
        self.n_patches = (L + S - P) // S + 1
        self.embed = nn.Linear(P, d)
        self.pos = nn.Parameter(torch.randn(1, self.n_patches, d) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(d, heads, ffn) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(self.n_patches * d, horizon)
        self.use_checkpoint = False

    def forward(self, x):  # [B, L, C]
        b = x.shape[0]
        x = self.revin.norm(x).permute(0, 2, 1)  # [B, C, L]
        x = self.pad(x).unfold(-1, P, S)  # [B, C, N, P]
        x = x.reshape(b * C, self.n_patches, P)
        h = self.embed(x) + self.pos
        for layer in self.layers:
            h = checkpoint(layer, h, use_reentrant=False) if self.use_checkpoint else layer(h)
        h = self.ln(h).flatten(1)
        y = self.head(h).view(b, C, -1).permute(0, 2, 1)
        return self.revin.denorm(y)


def data(b, horizon):
    x = torch.randn(b, L + horizon, C, device=device).cumsum(1) * 0.1
    return x[:, :L], x[:, L:]


model = PatchTST(96).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-2, fused=True)
scaler = torch.amp.GradScaler("cuda")
model.train()
for step in range(5):
    x, y = data(16, 96)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = F.mse_loss(model(x).float(), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print("step", step, "loss", loss.item(), "scale", scaler.get_scale())
print("after train max allocated", torch.cuda.max_memory_allocated())
report("train_fp16")

model.eval()
with torch.inference_mode():
    x, y = data(48, 96)
    pred = model(x)
    print("eval mse", F.mse_loss(pred, y).item(), "mae", (pred - y).abs().mean().item())
report("eval")

del pred, x, y
model.head = nn.Linear(model.n_patches * 128, 720).to(device)
model.use_checkpoint = True
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=1e-2, fused=True)
model.train()
for step in range(4):
    x, y = data(24, 720)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.mse_loss(model(x).float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("ckpt step", step, "loss", loss.item())
report("train_720_ckpt_bf16")
