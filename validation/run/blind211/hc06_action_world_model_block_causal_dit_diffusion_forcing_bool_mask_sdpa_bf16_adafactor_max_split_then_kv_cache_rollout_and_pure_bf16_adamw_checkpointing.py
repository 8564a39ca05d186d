"""An action-conditioned video world model in the style of Diffusion Forcing / Oasis / CausVid, written by
hand, under PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:512 set at the top. Video latents (16 channels, 32
x 32 a frame) are patchified 2 x 2 by reshape + nn.Linear into 256 tokens a frame; a 16-block DiT of 1024
(16 heads of 64, per-head RMSNorm on q and k, a SwiGLU MLP of 2,816) attends over all frames' tokens with
a block-causal boolean mask (a token sees every token of its own and earlier frames) passed to
F.scaled_dot_product_attention; no temporal position embedding (causality orders the frames), a learned
spatial one. Diffusion forcing: every frame carries its own noise level t in (0, 1) (rectified flow,
x_t = (1 - t) x0 + t noise, velocity target), so adaLN modulation is per frame (shift / scale / gate of
shape (B, F, 1, D) broadcast over the frame's tokens) from the timestep embedding plus an nn.Embedding of
the discrete action taken before the frame (16 actions).

Phases: the first step under bf16 autocast with torch.optim.Adafactor (lr 1e-3 relative, batch 4 x 16
frames: 4,096 tokens); 3 more steps; an autoregressive rollout under torch.inference_mode and bf16
autocast: 8 clean context frames are encoded once into a per-block key/value cache, then each of 16 new
frames is denoised by 8 Euler steps attending to the cache (no mask), and its clean pass is appended to
the cache, which keeps a sliding window of the last 8 frames (batch 2); then the model cast to bfloat16
and trained 2 steps with foreach AdamW on the bf16 weights, torch.utils.checkpoint (use_reentrant=False)
around every second block, on 24-frame clips at batch 2. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "max_split_size_mb:512"

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21106)
if SMALL:
    B, FR, HW, DIM, DEPTH, MLP = 2, 4, 8, 128, 2, 256
    CTX, NEW, STEPS, B_ROLL, LONG_FR, LONG_B = 2, 3, 2, 1, 6, 1
else:
    B, FR, HW, DIM, DEPTH, MLP = 4, 16, 32, 1024, 16, 2816
    CTX, NEW, STEPS, B_ROLL, LONG_FR, LONG_B = 8, 16, 8, 2, 24, 2
C_LAT = 16
HEADS = DIM // 64
TOK = (HW // 2) ** 2
N_ACTIONS = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def timestep_embedding(t, dim=256):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[..., None].float() * 1000.0 * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def block_causal_mask(frames, dev):
    idx = torch.arange(frames * TOK, device=dev) // TOK
    return idx[:, None] >= idx[None, :]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(DIM, 3 * DIM, bias=False)
        self.q_norm = nn.RMSNorm(64, eps=1e-6)
        self.k_norm = nn.RMSNorm(64, eps=1e-6)
        self.proj = nn.Linear(DIM, DIM)
        self.norm2 = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.w12 = nn.Linear(DIM, 2 * MLP, bias=False)
        self.w3 = nn.Linear(MLP, DIM, bias=False)
        self.ada = nn.Linear(DIM, 6 * DIM)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, x, c, mask=None, cache=None, store=False):
        b, f, n, d = x.shape
        sa, sca, ga, sm, scm, gm = self.ada(F.silu(c))[:, :, None].chunk(6, dim=-1)
        h = self.norm1(x) * (1 + sca) + sa
        q, k, v = self.qkv(h).view(b, f * n, 3, HEADS, 64).permute(2, 0, 3, 1, 4)
        q, k = self.q_norm(q), self.k_norm(k)
        if store:
            self.new_kv = (k, v)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + ga * self.proj(a.transpose(1, 2).reshape(b, f, n, d))
        h = self.norm2(x) * (1 + scm) + sm
        u, g = self.w12(h).chunk(2, dim=-1)
        return x + gm * self.w3(F.silu(u) * g)


class WorldModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Linear(C_LAT * 4, DIM)
        self.pos = nn.Parameter(torch.randn(1, 1, TOK, DIM) * 0.02)
        self.t_mlp = nn.Sequential(nn.Linear(256, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.action = nn.Embedding(N_ACTIONS, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Linear(DIM, 2 * DIM)
        self.out = nn.Linear(DIM, C_LAT * 4)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.ckpt = False

    def forward(self, x, t, actions, mask=None, caches=None, store=False):
        b, c, f, h, w = x.shape
        x = x.view(b, c, f, h // 2, 2, w // 2, 2).permute(0, 2, 3, 5, 1, 4, 6).reshape(b, f, TOK, c * 4)
        x = self.patch(x) + self.pos
        cond = self.t_mlp(timestep_embedding(t).to(self.pos.dtype)) + self.action(actions)
        for i, blk in enumerate(self.blocks):
            cache = caches[i] if caches is not None else None
            if self.ckpt and self.training and i % 2 == 0:
                x = checkpoint(blk, x, cond, mask, use_reentrant=False)
            else:
                x = blk(x, cond, mask, cache, store)
        shift, scale = self.ada(F.silu(cond))[:, :, None].chunk(2, dim=-1)
        x = self.out(self.norm(x) * (1 + scale) + shift)
        x = x.view(b, f, h // 2, w // 2, c, 2, 2).permute(0, 4, 1, 2, 5, 3, 6)
        return x.reshape(b, c, f, h, w)


model = WorldModel().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
opt = torch.optim.Adafactor(model.parameters(), lr=1e-3)


def train_step(batch, frames, autocast):
    x0 = torch.randn(batch, C_LAT, frames, HW, HW, device=device, dtype=next(model.parameters()).dtype)
    actions = torch.randint(0, N_ACTIONS, (batch, frames), device=device)
    t = torch.rand(batch, frames, device=device)
    noise = torch.randn_like(x0)
    tt = t[:, None, :, None, None].to(x0.dtype)
    xt = (1 - tt) * x0 + tt * noise
    mask = block_causal_mask(frames, device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and amp):
        pred = model(xt, t, actions, mask)
    loss = F.mse_loss(pred.float(), (noise - x0).float())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step(B, FR, True):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(B, FR, True)
print(f"step 3 loss {loss:.4f}")
report("train adafactor")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    context = torch.randn(B_ROLL, C_LAT, CTX, HW, HW, device=device)
    actions = torch.randint(0, N_ACTIONS, (B_ROLL, CTX + NEW), device=device)
    zeros = torch.zeros(B_ROLL, CTX, device=device)
    model(context, zeros, actions[:, :CTX], block_causal_mask(CTX, device), store=True)
    caches = [blk.new_kv for blk in model.blocks]
    frames = []
    for j in range(NEW):
        a = actions[:, CTX + j : CTX + j + 1]
        x = torch.randn(B_ROLL, C_LAT, 1, HW, HW, device=device)
        ts = torch.linspace(1.0, 0.0, STEPS + 1, device=device)
        for i in range(STEPS):
            v = model(x, ts[i].expand(B_ROLL, 1), a, caches=caches).float()
            x = x + (ts[i + 1] - ts[i]) * v
        model(x, torch.zeros(B_ROLL, 1, device=device), a, caches=caches, store=True)
        caches = [
            (
                torch.cat([ck, blk.new_kv[0]], dim=2)[:, :, -CTX * TOK :],
                torch.cat([cv, blk.new_kv[1]], dim=2)[:, :, -CTX * TOK :],
            )
            for (ck, cv), blk in zip(caches, model.blocks)
        ]
        frames.append(x)
    video = torch.cat(frames, dim=2)
    print(f"rollout {tuple(video.shape)} std {video.std().item():.4f}")
    del caches, frames, video
    for blk in model.blocks:
        del blk.new_kv
report("kv cache rollout")

model.train()
model = model.to(torch.bfloat16)
model.ckpt = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
for _ in range(2):
    loss = train_step(LONG_B, LONG_FR, False)
print(f"pure bf16 checkpointed loss {loss:.4f}")
report("pure bf16 adamw checkpointed")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
