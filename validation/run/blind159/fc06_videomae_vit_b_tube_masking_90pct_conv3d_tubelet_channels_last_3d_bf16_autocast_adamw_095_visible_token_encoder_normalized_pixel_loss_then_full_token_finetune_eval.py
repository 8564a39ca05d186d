"""A VideoMAE pre-training model written after the VideoMAE repository's modeling_pretrain.py:
clips of 16 frames x 224 x 224, a Conv3d tubelet embedding (2 x 16 x 16 -> 768; 8 x 14 x 14 =
1,568 tokens) run with the clips and its weight in channels_last_3d, a fixed sinusoidal position
table, tube masking (90% of the 196 spatial positions per clip, the same in every temporal slot,
from a per-sample random permutation), a ViT-B encoder (12 blocks of 768, 12 heads, qkv with
q_bias and v_bias concatenated around a zero k bias as in the repository, attention written out
as q*scale @ k^T, softmax, @ v) over the visible tokens only, a linear encoder-to-decoder map to
384, learned mask tokens plus positions, a 4-block decoder of 384 with 6 heads over all 1,568
tokens, and the loss the MSE over the masked tokens against per-patch normalised pixels (the clip
un-normalised, cut into 2 x 16 x 16 x 3 tubelets, each normalised by its own mean and variance).
bf16 autocast, AdamW (lr 1.5e-4, betas 0.9/0.95, weight decay 0.05) with no decay on biases,
norms and the mask token, batch 12, 2 steps (each its own phase); then the encoder fine-tuning
view: all 1,568 tokens through the encoder, mean pooling, fc_norm and a 400-way head, evaluated
under inference_mode and bf16 autocast at batch 6; then one fp32 step of that classifier at
batch 2 with gradient clipping; 5 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15906)
if SMALL:
    T, S, PATCH, TUBELET, DIM, DEPTH, HEADS, DEC_DIM, DEC_DEPTH, DEC_HEADS = 4, 32, 16, 2, 64, 2, 2, 32, 1, 2
    B, EVAL_B, FT_B = 2, 2, 1
else:
    T, S, PATCH, TUBELET, DIM, DEPTH, HEADS, DEC_DIM, DEC_DEPTH, DEC_HEADS = (
        16,
        224,
        16,
        2,
        768,
        12,
        12,
        384,
        4,
        6,
    )
    B, EVAL_B, FT_B = 12, 6, 2
MASK_RATIO = 0.9
NUM_CLASSES = 400
device = "cuda" if torch.cuda.is_available() else "cpu"
MEAN = torch.tensor([0.485, 0.456, 0.406], device=device)[None, :, None, None, None]
STD = torch.tensor([0.229, 0.224, 0.225], device=device)[None, :, None, None, None]


def get_sinusoid_encoding_table(n_position, d_hid):
    def get_position_angle_vec(position):
        return [position / np.power(10000, 2 * (hid_j // 2) / d_hid) for hid_j in range(d_hid)]

    table = np.array([get_position_angle_vec(pos_i) for pos_i in range(n_position)])
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.tensor(table, dtype=torch.float, requires_grad=False).unsqueeze(0)


class PatchEmbed(nn.Module):
    def __init__(self, img_size, patch_size, in_chans, embed_dim, num_frames, tubelet_size):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2 * (num_frames // tubelet_size)
        self.proj = nn.Conv3d(
            in_chans,
            embed_dim,
            kernel_size=(tubelet_size, patch_size, patch_size),
            stride=(tubelet_size, patch_size, patch_size),
        )

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        head_dim = dim // num_heads
        self.scale = head_dim**-0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        self.q_bias = nn.Parameter(torch.zeros(dim))
        self.v_bias = nn.Parameter(torch.zeros(dim))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, _C = x.shape
        qkv_bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias, requires_grad=False), self.v_bias))
        qkv = F.linear(input=x, weight=self.qkv.weight, bias=qkv_bias)
        qkv = qkv.reshape(B, N, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, -1)
        return self.proj(x)


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = PatchEmbed(S, PATCH, 3, DIM, T, TUBELET)
        self.register_buffer("pos_embed", get_sinusoid_encoding_table(self.patch_embed.num_patches, DIM))
        self.blocks = nn.ModuleList([Block(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM, eps=1e-6)

    def forward(self, x, mask=None):
        x = self.patch_embed(x)
        x = x + self.pos_embed.type_as(x).to(x.device).clone().detach()
        B, _, C = x.shape
        if mask is not None:
            x = x[~mask].reshape(B, -1, C)  # visible tokens only
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)


class PretrainVideoMAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.encoder_to_decoder = nn.Linear(DIM, DEC_DIM, bias=False)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, DEC_DIM))
        self.register_buffer(
            "pos_embed", get_sinusoid_encoding_table(self.encoder.patch_embed.num_patches, DEC_DIM)
        )
        self.decoder_blocks = nn.ModuleList([Block(DEC_DIM, DEC_HEADS) for _ in range(DEC_DEPTH)])
        self.decoder_norm = nn.LayerNorm(DEC_DIM, eps=1e-6)
        self.head = nn.Linear(DEC_DIM, 3 * TUBELET * PATCH**2)
        nn.init.trunc_normal_(self.mask_token, std=0.02)

    def forward(self, x, mask):
        x_vis = self.encoder_to_decoder(self.encoder(x, mask))
        B, _N, C = x_vis.shape
        pos = self.pos_embed.expand(B, -1, -1).type_as(x).to(x.device).clone().detach()
        pos_vis = pos[~mask].reshape(B, -1, C)
        pos_mask = pos[mask].reshape(B, -1, C)
        x_full = torch.cat([x_vis + pos_vis, self.mask_token + pos_mask], dim=1)
        for blk in self.decoder_blocks:
            x_full = blk(x_full)
        n_masked = pos_mask.shape[1]
        return self.head(self.decoder_norm(x_full[:, -n_masked:]))


def tube_mask(batch):
    frames, side = T // TUBELET, S // PATCH
    per_frame = side * side
    n_mask = int(MASK_RATIO * per_frame)
    noise = torch.rand(batch, per_frame, device=device)
    ids = noise.argsort(dim=1)
    frame_mask = torch.zeros(batch, per_frame, dtype=torch.bool, device=device)
    frame_mask.scatter_(1, ids[:, :n_mask], True)
    return frame_mask.repeat(1, frames)  # (B, frames * side * side), the same in every slot


def normalized_tubelets(videos, mask):
    unnorm = videos * STD + MEAN
    B, C, Tn, H, W = unnorm.shape
    p, t = PATCH, TUBELET
    x = unnorm.reshape(B, C, Tn // t, t, H // p, p, W // p, p)
    x = x.permute(0, 2, 4, 6, 3, 5, 7, 1).reshape(B, (Tn // t) * (H // p) * (W // p), t * p * p, C)
    x = (x - x.mean(dim=-2, keepdim=True)) / (x.var(dim=-2, unbiased=True, keepdim=True).sqrt() + 1e-6)
    x = x.flatten(2)
    return x[mask].reshape(B, -1, t * p * p * C)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if len(p.shape) == 1 or name.endswith(".bias") or name in ("mask_token",):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": weight_decay}]


model = PretrainVideoMAE().to(device)
model.encoder.patch_embed.to(memory_format=torch.channels_last_3d)
optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=1.5e-4, betas=(0.9, 0.95))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    videos = ((torch.rand(B, 3, T, S, S, device=device) - MEAN) / STD).contiguous(
        memory_format=torch.channels_last_3d
    )
    mask = tube_mask(B)
    with torch.no_grad():
        labels = normalized_tubelets(videos, mask)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        outputs = model(videos, mask)
        loss = F.mse_loss(outputs, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"pretrain step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del videos, mask, labels, outputs, loss


class VideoClassifier(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.encoder.norm = nn.Identity()
        self.fc_norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, NUM_CLASSES)

    def forward(self, x):
        return self.head(self.fc_norm(self.encoder(x).mean(1)))


classifier = VideoClassifier(model.encoder).to(device)
del model, optimizer
classifier.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    clips = torch.randn(EVAL_B, 3, T, S, S, device=device).contiguous(memory_format=torch.channels_last_3d)
    probs = classifier(clips).softmax(-1)
print("eval", tuple(probs.shape))
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

classifier.train()
ft_opt = torch.optim.AdamW(classifier.parameters(), lr=5e-4, weight_decay=0.05)
clips = torch.randn(FT_B, 3, T, S, S, device=device).contiguous(memory_format=torch.channels_last_3d)
labels = torch.randint(0, NUM_CLASSES, (FT_B,), device=device)
loss = F.cross_entropy(classifier(clips), labels, label_smoothing=0.1)
loss.backward()
torch.nn.utils.clip_grad_norm_(classifier.parameters(), max_norm=5.0)
ft_opt.step()
print(f"fine-tune loss {loss.item():.4f}")
if device == "cuda":
    print(f"fine-tune peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
