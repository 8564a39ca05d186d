"""PixArt-alpha-like text-to-image diffusion transformer trained with flow matching, the text encoder a
T5 encoder built from a transformers T5Config (random weights, nothing downloaded).

Text: a T5EncoderModel (d_model 1024, 12 layers, 16 heads, gated-GELU FFN 2816, vocabulary 32,128) in
bf16, frozen, run under no_grad on random token ids of 120 positions with right padding (lengths drawn
per caption, attention_mask); its last hidden state is the caption.

DiT: latents 4 x 32 x 32 (256 px), 2 x 2 patches by a Conv2d (256 tokens of 1152), fixed sin-cos
position embedding; the caption through a 2-layer GELU-tanh MLP (1024 -> 1152); adaLN-single (one shared
t_block SiLU + Linear 1152 -> 6 x 1152 from the timestep embedding, plus a learned per-block 6 x 1152
scale_shift_table), 14 blocks of self-attention (16 heads, SDPA), cross-attention to the caption tokens
(SDPA with a boolean key mask from the caption's attention_mask) and a GELU-tanh MLP x4; captions replaced
by a learned null embedding (y_embedding) for 10 % of the batch. Objective: rectified flow (uniform t,
velocity target).

Training: fp32 weights under bf16 autocast, torch.optim.Adafactor (lr 1e-3, its factored second moments),
2 micro-batches of 32 per step (gradient accumulation), clip_grad_norm_ at 0.01 as PixArt does; forward
hooks on every block record the RMS of its output (kept as 0-d tensors, read once per step).

Then gc.collect() + torch.cuda.empty_cache() and sampling under inference_mode: 8 Euler steps of the flow
ODE with classifier-free guidance 4.5 on 16 captions (the batch doubled with the null embedding).

Phases: encoding the training captions; the first optimizer step; 2 more steps; CFG Euler sampling.
4 phases."""

import gc
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import T5Config, T5EncoderModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2006)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    MICRO, ACCUM, STEPS, SAMPLE_B, EULER, LAT, HID, DEPTH, HEADS, TXT_LEN = 2, 2, 1, 2, 2, 8, 64, 2, 4, 12
    t5_cfg = T5Config(
        vocab_size=1000,
        d_model=32,
        d_kv=8,
        d_ff=64,
        num_layers=2,
        num_heads=4,
        feed_forward_proj="gated-gelu",
    )
else:
    MICRO, ACCUM, STEPS, SAMPLE_B, EULER, LAT, HID, DEPTH, HEADS, TXT_LEN = (
        32,
        2,
        2,
        16,
        8,
        32,
        1152,
        14,
        16,
        120,
    )
    t5_cfg = T5Config(
        vocab_size=32128,
        d_model=1024,
        d_kv=64,
        d_ff=2816,
        num_layers=12,
        num_heads=16,
        feed_forward_proj="gated-gelu",
    )
PATCH, C_LAT = 2, 4
TXT_DIM = t5_cfg.d_model


def report(tag):
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"{tag}: max_memory_allocated={peak:,} memory_reserved={reserved:,}")
        torch.cuda.reset_peak_memory_stats()


text_encoder = T5EncoderModel(t5_cfg).to(device, dtype=torch.bfloat16).eval().requires_grad_(False)


def encode_captions(n):
    lengths = torch.randint(8, TXT_LEN + 1, (n,))
    ids = torch.randint(1, t5_cfg.vocab_size, (n, TXT_LEN))
    mask = (torch.arange(TXT_LEN)[None] < lengths[:, None]).long()
    ids = ids * mask
    ids, mask = ids.to(device), mask.to(device)
    with torch.no_grad():
        emb = text_encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    return emb, mask


captions = [encode_captions(MICRO) for _ in range(ACCUM * (STEPS + 1))]
print(f"encoded {len(captions)} caption batches of {tuple(captions[0][0].shape)}")
report("text encoding")


def sincos_2d(dim, grid):
    gy, gx = np.meshgrid(np.arange(grid, dtype=np.float32), np.arange(grid, dtype=np.float32), indexing="ij")
    omega = 1.0 / 10000 ** (np.arange(dim // 4, dtype=np.float64) / (dim / 4.0))
    out = [f(np.einsum("m,d->md", g.reshape(-1), omega)) for g in (gy, gx) for f in (np.sin, np.cos)]
    return torch.from_numpy(np.concatenate(out, axis=1)).float().unsqueeze(0)


def t2i_modulate(x, shift, scale):
    return x * (1 + scale) + shift


class PixArtBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.q_linear = nn.Linear(dim, dim)
        self.kv_linear = nn.Linear(dim, 2 * dim)
        self.cross_proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim)
        )
        self.scale_shift_table = nn.Parameter(torch.randn(6, dim) / dim**0.5)

    def heads_of(self, x):
        b, n, d = x.shape
        return x.view(b, n, self.heads, d // self.heads).transpose(1, 2)

    def forward(self, x, y, t, key_mask):
        b, n, d = x.shape
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            self.scale_shift_table[None] + t.reshape(b, 6, -1)
        ).chunk(6, dim=1)
        h = t2i_modulate(self.norm1(x), shift_msa, scale_msa)
        q, k, v = self.qkv(h).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + gate_msa * self.proj(a)
        q = self.heads_of(self.q_linear(x))
        k, v = (self.heads_of(z) for z in self.kv_linear(y).chunk(2, dim=-1))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask[:, None, None, :])
        x = x + self.cross_proj(a.transpose(1, 2).reshape(b, n, d))
        return x + gate_mlp * self.mlp(t2i_modulate(self.norm2(x), shift_mlp, scale_mlp))


class PixArt(nn.Module):
    def __init__(self):
        super().__init__()
        self.x_embedder = nn.Conv2d(C_LAT, HID, PATCH, stride=PATCH)
        self.register_buffer("pos_embed", sincos_2d(HID, LAT // PATCH), persistent=False)
        self.t_embedder = nn.Sequential(nn.Linear(256, HID), nn.SiLU(), nn.Linear(HID, HID))
        self.t_block = nn.Sequential(nn.SiLU(), nn.Linear(HID, 6 * HID))
        self.y_embedder = nn.Sequential(
            nn.Linear(TXT_DIM, HID), nn.GELU(approximate="tanh"), nn.Linear(HID, HID)
        )
        self.y_embedding = nn.Parameter(torch.randn(TXT_LEN, TXT_DIM) / TXT_DIM**0.5)
        self.blocks = nn.ModuleList([PixArtBlock(HID, HEADS) for _ in range(DEPTH)])
        self.norm_final = nn.LayerNorm(HID, elementwise_affine=False, eps=1e-6)
        self.final_table = nn.Parameter(torch.randn(2, HID) / HID**0.5)
        self.final = nn.Linear(HID, PATCH * PATCH * C_LAT)
        nn.init.zeros_(self.final.weight)
        nn.init.zeros_(self.final.bias)

    def forward(self, x, t, y, mask, drop=None):
        b = x.shape[0]
        if drop is not None:
            y = torch.where(drop[:, None, None], self.y_embedding.to(y.dtype)[None], y)
            mask = torch.where(drop[:, None], torch.ones_like(mask), mask)
        x = self.x_embedder(x).flatten(2).transpose(1, 2) + self.pos_embed
        half = 128
        freqs = torch.exp(-math.log(10000) * torch.arange(half, dtype=torch.float32, device=x.device) / half)
        args = (t * 1000)[:, None].float() * freqs[None]
        t_emb = self.t_embedder(torch.cat([torch.cos(args), torch.sin(args)], -1))
        t0 = self.t_block(t_emb)
        y = self.y_embedder(y.to(self.y_embedding.dtype))
        key_mask = mask.bool()
        for blk in self.blocks:
            x = blk(x, y, t0, key_mask)
        shift, scale = (self.final_table[None] + t_emb[:, None]).chunk(2, dim=1)
        x = self.final(t2i_modulate(self.norm_final(x), shift, scale))
        g = LAT // PATCH
        x = x.reshape(b, g, g, PATCH, PATCH, C_LAT).permute(0, 5, 1, 3, 2, 4)
        return x.reshape(b, C_LAT, LAT, LAT)


model = PixArt().to(device)
opt = torch.optim.Adafactor(model.parameters(), lr=1e-3, weight_decay=0.0)
print(f"PixArt {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")

block_rms = {}


def make_hook(i):
    def hook(module, inputs, output):
        block_rms[i] = output.detach().float().pow(2).mean().sqrt()

    return hook


handles = [blk.register_forward_hook(make_hook(i)) for i, blk in enumerate(model.blocks)]


def train_step(step):
    model.train()
    total = 0.0
    for m in range(ACCUM):
        y, mask = captions[step * ACCUM + m]
        x0 = torch.randn(MICRO, C_LAT, LAT, LAT, device=device)
        noise = torch.randn_like(x0)
        t = torch.rand(MICRO, device=device)
        xt = (1 - t.view(-1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1) * noise
        drop = torch.rand(MICRO, device=device) < 0.1
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            v = model(xt, t, y, mask, drop)
        loss = F.mse_loss(v.float(), noise - x0) / ACCUM
        loss.backward()
        total += loss.item()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.01)
    opt.step()
    opt.zero_grad(set_to_none=True)
    rms = torch.stack([block_rms[i] for i in range(len(model.blocks))]).tolist()
    return total, gn.item(), rms


loss, gn, rms = train_step(0)
print(f"step 0 loss {loss:.4f} grad norm {gn:.3f} block rms first {rms[0]:.3f} last {rms[-1]:.3f}")
report("first step")
for s in range(1, STEPS + 1):
    loss, gn, rms = train_step(s)
print(f"step {STEPS} loss {loss:.4f} grad norm {gn:.3f}")
report("train")

for h in handles:
    h.remove()
captions = None
gc.collect()
torch.cuda.empty_cache()

model.eval()
with torch.inference_mode():
    y, mask = encode_captions(SAMPLE_B)
    null_y = model.y_embedding.to(y.dtype)[None].expand(SAMPLE_B, -1, -1)
    y_in = torch.cat([y, null_y])
    mask_in = torch.cat([mask, torch.ones_like(mask)])
    z = torch.randn(SAMPLE_B, C_LAT, LAT, LAT, device=device)
    ts = torch.linspace(1.0, 0.0, EULER + 1, device=device)
    for i in range(EULER):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            v = model(torch.cat([z, z]), ts[i].expand(2 * SAMPLE_B), y_in, mask_in).float()
        cond, uncond = v.chunk(2)
        z = z + (ts[i + 1] - ts[i]) * (uncond + 4.5 * (cond - uncond))
print(f"sampled latents std {z.std().item():.3f}")
if device == "cuda":
    print(f"sampling max_memory_allocated={torch.cuda.max_memory_allocated():,}")
