"""MMDiT (Stable Diffusion 3-like) written by hand: joint text-image attention over two token streams.

Conditioning inputs are random stand-ins for the frozen encoders' outputs, made on the device: T5-XXL-like
token features (154 x 4096, bf16) and a pooled CLIP-like vector (2048). Latents 16 x 64 x 64 (a 512 px
image through a 16-channel VAE), 2 x 2 patches by a Conv2d: 1,024 image tokens plus a learned position
embedding; the text features through a Linear 4096 -> 1024 (154 context tokens).

Each of the 12 joint blocks (width 1024, 16 heads of 64) has separate weights per stream: adaLN-Zero
modulation (SiLU + Linear to 6 x 1024) from c = timestep embedding + pooled embedding, LayerNorm without
affine, a qkv Linear, RMSNorm on q and k per head (nn.RMSNorm(64)), then the two streams' q, k, v are
concatenated along the sequence (154 + 1,024 tokens) into one F.scaled_dot_product_attention and split
back; an output projection and a GELU-tanh MLP x4 per stream. The last block's context stream is
"pre-only" (it gives k and v and has no output projection or MLP), as in SD3.

Training: the whole model in bf16 (model.to(torch.bfloat16)), AdamW(fused=True, lr 1e-4, betas
(0.9, 0.95), weight decay 0.01), clip_grad_norm_ 1.0; batch 16; rectified flow with the velocity target
and SD3's shifted logit-normal timesteps (t = sigmoid(N(0,1)), then t' = 3t / (1 + 2t)); the text tokens
and pooled vector dropped to zeros for 10 % of the batch (for classifier-free guidance).

Then Euler sampling under inference_mode: 8 steps on the shifted schedule with CFG 5.0 (the batch of 8
doubled with zeroed conditioning). Then one training step at 1024 px (16 x 128 x 128 latents, 4,096 image
tokens) at batch 4.

Phases: the first step; 2 more steps; Euler CFG sampling; the 1024 px step. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2003)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    B, LAT, HID, DEPTH, HEADS, T5_LEN, T5_DIM, POOL, STEPS, SAMPLE_B, EULER, LAT_HI, B_HI = (
        2,
        8,
        64,
        2,
        4,
        10,
        32,
        16,
        1,
        2,
        2,
        16,
        1,
    )
else:
    B, LAT, HID, DEPTH, HEADS, T5_LEN, T5_DIM, POOL, STEPS, SAMPLE_B, EULER, LAT_HI, B_HI = (
        16,
        64,
        1024,
        12,
        16,
        154,
        4096,
        2048,
        2,
        8,
        8,
        128,
        4,
    )
PATCH, C_LAT, SHIFT = 2, 16, 3.0
DT = torch.bfloat16


def report(tag):
    if device == "cuda":
        print(f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
        torch.cuda.reset_peak_memory_stats()


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_embedding(t, dim=256, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class StreamIn(nn.Module):
    """One stream's half of a joint block before attention."""

    def __init__(self, hidden, heads, pre_only):
        super().__init__()
        self.heads = heads
        self.pre_only = pre_only
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.q_norm = nn.RMSNorm(hidden // heads, eps=1e-6)
        self.k_norm = nn.RMSNorm(hidden // heads, eps=1e-6)
        n_mod = 2 if pre_only else 6
        self.adaLN = nn.Sequential(nn.SiLU(), nn.Linear(hidden, n_mod * hidden))
        if not pre_only:
            self.proj = nn.Linear(hidden, hidden)
            self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
            self.mlp = nn.Sequential(
                nn.Linear(hidden, 4 * hidden), nn.GELU(approximate="tanh"), nn.Linear(4 * hidden, hidden)
            )

    def pre_attention(self, x, c):
        mods = self.adaLN(c).chunk(2 if self.pre_only else 6, dim=1)
        h = modulate(self.norm1(x), mods[0], mods[1])
        b, n, d = h.shape
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).unbind(2)
        return self.q_norm(q), self.k_norm(k), v, mods

    def post_attention(self, x, attn, mods):
        _, _, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods
        x = x + gate_msa.unsqueeze(1) * self.proj(attn)
        return x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))


class JointBlock(nn.Module):
    def __init__(self, hidden, heads, last):
        super().__init__()
        self.ctx = StreamIn(hidden, heads, pre_only=last)
        self.img = StreamIn(hidden, heads, pre_only=False)

    def forward(self, ctx, x, c):
        qc, kc, vc, mc = self.ctx.pre_attention(ctx, c)
        qx, kx, vx, mx = self.img.pre_attention(x, c)
        n_ctx = ctx.shape[1]
        q = torch.cat([qc, qx], dim=1).transpose(1, 2)
        k = torch.cat([kc, kx], dim=1).transpose(1, 2)
        v = torch.cat([vc, vx], dim=1).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2)
        o_ctx, o_img = o[:, :n_ctx], o[:, n_ctx:]
        x = self.img.post_attention(x, o_img, mx)
        ctx = None if self.ctx.pre_only else self.ctx.post_attention(ctx, o_ctx, mc)
        return ctx, x


class MMDiT(nn.Module):
    def __init__(self, max_lat):
        super().__init__()
        self.x_embedder = nn.Conv2d(C_LAT, HID, PATCH, stride=PATCH)
        self.max_grid = max_lat // PATCH
        self.pos_embed = nn.Parameter(torch.randn(1, self.max_grid, self.max_grid, HID) * 0.02)
        self.t_embedder = nn.Sequential(nn.Linear(256, HID), nn.SiLU(), nn.Linear(HID, HID))
        self.y_embedder = nn.Sequential(nn.Linear(POOL, HID), nn.SiLU(), nn.Linear(HID, HID))
        self.context_embedder = nn.Linear(T5_DIM, HID)
        self.blocks = nn.ModuleList([JointBlock(HID, HEADS, last=(i == DEPTH - 1)) for i in range(DEPTH)])
        self.norm_out = nn.LayerNorm(HID, elementwise_affine=False, eps=1e-6)
        self.final_mod = nn.Sequential(nn.SiLU(), nn.Linear(HID, 2 * HID))
        self.final = nn.Linear(HID, PATCH * PATCH * C_LAT)
        for m in (
            [self.final_mod[-1], self.final]
            + [b.img.adaLN[-1] for b in self.blocks]
            + [b.ctx.adaLN[-1] for b in self.blocks]
        ):
            nn.init.zeros_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x, t, context, pooled):
        b, _, hh, ww = x.shape
        gh, gw = hh // PATCH, ww // PATCH
        x = self.x_embedder(x).flatten(2).transpose(1, 2)
        top = (self.max_grid - gh) // 2
        pos = self.pos_embed[:, top : top + gh, top : top + gw].reshape(1, gh * gw, -1)
        x = x + pos
        c = self.t_embedder(timestep_embedding(t * 1000).to(x.dtype)) + self.y_embedder(pooled)
        ctx = self.context_embedder(context)
        for blk in self.blocks:
            ctx, x = blk(ctx, x, c)
        shift, scale = self.final_mod(c).chunk(2, dim=1)
        x = self.final(modulate(self.norm_out(x), shift, scale))
        x = x.view(b, gh, gw, PATCH, PATCH, C_LAT).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, C_LAT, hh, ww)


def shifted(t):
    return SHIFT * t / (1 + (SHIFT - 1) * t)


def batch(bsz, lat):
    x0 = torch.randn(bsz, C_LAT, lat, lat, device=device, dtype=DT)
    context = torch.randn(bsz, T5_LEN, T5_DIM, device=device, dtype=DT)
    pooled = torch.randn(bsz, POOL, device=device, dtype=DT)
    keep = (torch.rand(bsz, device=device) > 0.1).to(DT)
    return x0, context * keep.view(-1, 1, 1), pooled * keep.view(-1, 1)


def loss_fn(model, x0, context, pooled):
    t = shifted(torch.sigmoid(torch.randn(x0.shape[0], device=device)))
    noise = torch.randn_like(x0)
    tt = t.view(-1, 1, 1, 1).to(DT)
    xt = (1 - tt) * x0 + tt * noise
    v = model(xt, t, context, pooled)
    return F.mse_loss(v.float(), (noise - x0).float())


model = MMDiT(LAT_HI).to(device=device, dtype=DT)
opt = torch.optim.AdamW(
    model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.01, fused=device == "cuda"
)
print(f"MMDiT parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M")


def step(bsz, lat):
    model.train()
    loss = loss_fn(model, *batch(bsz, lat))
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item(), gn.item()


loss, gn = step(B, LAT)
print(f"step 0 loss {loss:.4f} grad norm {gn:.3f}")
report("first step")
for _ in range(STEPS):
    loss, gn = step(B, LAT)
print(f"step {STEPS} loss {loss:.4f} grad norm {gn:.3f}")
report("train")

model.eval()
with torch.inference_mode():
    _, context, pooled = batch(SAMPLE_B, LAT)
    ctx_in = torch.cat([context, torch.zeros_like(context)])
    pool_in = torch.cat([pooled, torch.zeros_like(pooled)])
    x = torch.randn(SAMPLE_B, C_LAT, LAT, LAT, device=device, dtype=DT)
    sigmas = shifted(torch.linspace(1.0, 0.0, EULER + 1, device=device))
    for i in range(EULER):
        t = sigmas[i].expand(2 * SAMPLE_B)
        v = model(torch.cat([x, x]), t, ctx_in, pool_in).float()
        cond, uncond = v.chunk(2)
        v = uncond + 5.0 * (cond - uncond)
        x = (x.float() + (sigmas[i + 1] - sigmas[i]) * v).to(DT)
    print(f"latent std {x.float().std().item():.3f}")
report("euler cfg sampling")

loss, gn = step(B_HI, LAT_HI)
print(f"1024px step loss {loss:.4f} grad norm {gn:.3f}")
if device == "cuda":
    print(f"1024px peak {torch.cuda.max_memory_allocated() / 1e9:.3f} GB")
