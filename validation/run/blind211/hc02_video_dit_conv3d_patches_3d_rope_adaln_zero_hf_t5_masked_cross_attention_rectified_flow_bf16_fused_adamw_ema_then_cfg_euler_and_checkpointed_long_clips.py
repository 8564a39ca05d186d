"""A text-to-video diffusion transformer written by hand in the style of Open-Sora / Latte / CogVideoX: video
latents (16 channels, 8 frames of 32 x 32: a 256-pixel clip through a 4x-temporal, 8x-spatial VAE) are
patchified by a Conv3d with kernel = stride = (1, 2, 2) into 2,048 tokens of 768; 12 DiT blocks with
adaLN-Zero modulation from the timestep (shift / scale / gate for attention, cross-attention and MLP),
full space-time self-attention through F.scaled_dot_product_attention with 3-D rotary positions applied by
hand (the 64-dim head split 16 / 24 / 24 over t, h, w; cos and sin tables built once per shape with
meshgrid), cross-attention to text with a boolean key-padding mask (B, 1, 1, L) through SDPA, and a
GELU(tanh) MLP of 4x. Text comes from a frozen transformers T5EncoderModel from a T5Config (6 layers of
512, vocabulary 32,128; random token ids with random lengths, padding masked) run in bf16 under no_grad;
captions are dropped to zeros with p 0.1 on the device for classifier-free guidance.

Rectified flow: x_t = (1 - t) x0 + t noise with t from a logit-normal, the model predicts the velocity
noise - x0, MSE. bf16 autocast, fused AdamW (lr 1e-4, weight decay 0), clipping at 1.0 and an fp32 EMA of
the weights (copy.deepcopy, torch._foreach_lerp_ at decay 0.999).

Phases: the first step (batch 8); 3 more steps; 20 Euler steps from t = 1 to 0 with the EMA model under
torch.inference_mode and bf16 autocast, guidance 6 (conditional and unconditional batches concatenated,
batch 4); then 2 steps on 16-frame clips (4,096 tokens) at batch 4 with torch.utils.checkpoint
(use_reentrant=False) around every block. 4 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import T5Config, T5EncoderModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(21102)
if SMALL:
    B, FR, HW, DIM, DEPTH, SAMPLE_B, SAMPLE_STEPS, LONG_FR, LONG_B, TXT = 2, 2, 8, 128, 2, 2, 2, 4, 1, 16
else:
    B, FR, HW, DIM, DEPTH, SAMPLE_B, SAMPLE_STEPS, LONG_FR, LONG_B, TXT = 8, 8, 32, 768, 12, 4, 20, 16, 4, 120
HEADS = DIM // 64
C_LAT = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def timestep_embedding(t, dim=256):
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t[:, None].float() * 1000.0 * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


_rope_cache = {}


def rope_3d(t, h, w, dev):
    key = (t, h, w)
    if key not in _rope_cache:
        parts = []
        grids = torch.meshgrid(
            torch.arange(t, device=dev),
            torch.arange(h, device=dev),
            torch.arange(w, device=dev),
            indexing="ij",
        )
        for pos, d in zip(grids, (16, 24, 24)):
            inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=dev).float() / d))
            ang = pos.reshape(-1, 1).float() * inv[None]
            parts.append(torch.cat([ang, ang], dim=-1))
        ang = torch.cat(parts, dim=-1)
        _rope_cache[key] = (ang.cos(), ang.sin())
    return _rope_cache[key]


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, cos, sin):
    return (x.float() * cos + rotate_half(x.float()) * sin).to(x.dtype)


def modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class Block(nn.Module):
    def __init__(self, dim, heads, text_dim):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.q_norm = nn.LayerNorm(64, eps=1e-6)
        self.k_norm = nn.LayerNorm(64, eps=1e-6)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.cq = nn.Linear(dim, dim)
        self.ckv = nn.Linear(text_dim, 2 * dim)
        self.cproj = nn.Linear(dim, dim)
        self.norm3 = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.ada = nn.Linear(dim, 9 * dim)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)

    def forward(self, x, c, txt, txt_mask, cos, sin):
        b, n, d = x.shape
        sa, sc, ga, sx, scx, gx, sm, scm, gm = self.ada(F.silu(c)).chunk(9, dim=-1)
        h = modulate(self.norm1(x), sa, sc)
        q, k, v = self.qkv(h).reshape(b, n, 3, self.heads, 64).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(self.q_norm(q), cos, sin), apply_rope(self.k_norm(k), cos, sin)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
        x = x + ga[:, None] * self.proj(a)
        h = modulate(self.norm2(x), sx, scx)
        q = self.cq(h).reshape(b, n, self.heads, 64).transpose(1, 2)
        k, v = self.ckv(txt).reshape(b, txt.shape[1], 2, self.heads, 64).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=txt_mask[:, None, None, :])
        x = x + gx[:, None] * self.cproj(a.transpose(1, 2).reshape(b, n, d))
        h = modulate(self.norm3(x), sm, scm)
        return x + gm[:, None] * self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class VideoDiT(nn.Module):
    def __init__(self, text_dim):
        super().__init__()
        self.patch = nn.Conv3d(C_LAT, DIM, kernel_size=(1, 2, 2), stride=(1, 2, 2))
        self.t_embed = nn.Sequential(nn.Linear(256, DIM), nn.SiLU(), nn.Linear(DIM, DIM))
        self.blocks = nn.ModuleList(Block(DIM, HEADS, text_dim) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(DIM, elementwise_affine=False, eps=1e-6)
        self.ada = nn.Linear(DIM, 2 * DIM)
        self.out = nn.Linear(DIM, 4 * C_LAT)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)
        self.ckpt = False

    def forward(self, x, t, txt, txt_mask):
        b, c, f, h, w = x.shape
        x = self.patch(x).flatten(2).transpose(1, 2)
        c_emb = self.t_embed(timestep_embedding(t))
        cos, sin = rope_3d(f, h // 2, w // 2, x.device)
        for blk in self.blocks:
            if self.ckpt and self.training:
                x = checkpoint(blk, x, c_emb, txt, txt_mask, cos, sin, use_reentrant=False)
            else:
                x = blk(x, c_emb, txt, txt_mask, cos, sin)
        shift, scale = self.ada(F.silu(c_emb)).chunk(2, dim=-1)
        x = self.out(modulate(self.norm(x), shift, scale))
        x = x.reshape(b, f, h // 2, w // 2, c, 2, 2).permute(0, 4, 1, 2, 5, 3, 6)
        return x.reshape(b, c, f, h, w)


t5_cfg = T5Config(
    vocab_size=32128,
    d_model=512,
    d_kv=64,
    d_ff=2048,
    num_layers=6,
    num_heads=8,
    feed_forward_proj="gated-gelu",
)
t5 = T5EncoderModel(t5_cfg).to(device, torch.bfloat16 if amp else torch.float32).eval().requires_grad_(False)
model = VideoDiT(t5_cfg.d_model).to(device)
ema = copy.deepcopy(model).requires_grad_(False)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=device == "cuda")
params, ema_params = list(model.parameters()), list(ema.parameters())
print(f"dit params {sum(p.numel() for p in params)}")


def encode_text(n):
    ids = torch.randint(1, 32128, (n, TXT), device=device)
    lens = torch.randint(8, TXT + 1, (n,), device=device)
    mask = torch.arange(TXT, device=device)[None] < lens[:, None]
    with torch.no_grad():
        emb = t5(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    return emb, mask


def train_step(batch, frames):
    x0 = torch.randn(batch, C_LAT, frames, HW, HW, device=device)
    txt, mask = encode_text(batch)
    keep = (torch.rand(batch, device=device) > 0.1).to(txt.dtype)
    txt = txt * keep[:, None, None]
    t = torch.sigmoid(torch.randn(batch, device=device))
    noise = torch.randn_like(x0)
    xt = (1 - t.view(-1, 1, 1, 1, 1)) * x0 + t.view(-1, 1, 1, 1, 1) * noise
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = model(xt, t, txt, mask)
    loss = F.mse_loss(pred.float(), noise - x0)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    with torch.no_grad():
        torch._foreach_lerp_(ema_params, params, 0.001)
    return loss.item()


model.train()
print(f"step 0 loss {train_step(B, FR):.4f}")
report("first step")
for _ in range(3):
    loss = train_step(B, FR)
print(f"step 3 loss {loss:.4f}")
report("train")

with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    txt, mask = encode_text(SAMPLE_B)
    txt_all = torch.cat([txt, torch.zeros_like(txt)])
    mask_all = torch.cat([mask, mask])
    x = torch.randn(SAMPLE_B, C_LAT, FR, HW, HW, device=device)
    ts = torch.linspace(1.0, 0.0, SAMPLE_STEPS + 1, device=device)
    for i in range(SAMPLE_STEPS):
        t = ts[i].expand(2 * SAMPLE_B)
        v_cond, v_uncond = ema(torch.cat([x, x]), t, txt_all, mask_all).float().chunk(2)
        v = v_uncond + 6.0 * (v_cond - v_uncond)
        x = x + (ts[i + 1] - ts[i]) * v
    print(f"sample std {x.std().item():.4f}")
    sample = x.cpu()
report("cfg euler sampling")

model.ckpt = True
for _ in range(2):
    loss = train_step(LONG_B, LONG_FR)
print(f"long clip checkpointed loss {loss:.4f}")
report("checkpointed long clips")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
