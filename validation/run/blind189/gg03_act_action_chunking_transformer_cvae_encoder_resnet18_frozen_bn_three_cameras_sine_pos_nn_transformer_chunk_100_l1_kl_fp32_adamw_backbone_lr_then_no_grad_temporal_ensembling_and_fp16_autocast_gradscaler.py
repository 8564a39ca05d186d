"""ACT, the Action Chunking Transformer of ALOHA (Zhao et al. 2023), written by hand after the reference
code with nn.Transformer for the main encoder-decoder: a torchvision ResNet-18 backbone (random init)
with DETR's FrozenBatchNorm2d (buffers only, passed as norm_layer), cut after layer4, applied to three
cameras (top, left wrist, right wrist; 240 x 320 float frames normalised with the ImageNet mean and std,
feature maps 8 x 10), a 1x1 conv to the 512-dim model width and DETR's 2-D sine position embedding added
to the image tokens; the latent style variable and the 14-dim joint positions are two more tokens (242
in all). The CVAE encoder is an nn.TransformerEncoder (4 layers, 512, 8 heads, feed-forward 3200, ReLU,
dropout 0.1) over [CLS, qpos, 100 actions] with a key padding mask for the padded end of each chunk,
giving the mean and log-variance of a 32-dim latent (reparameterised). The main nn.Transformer has 4
encoder and 7 decoder layers (same widths, batch_first=False), 100 learned action queries; the decoder
output goes to a Linear(512, 14) action head and an is-pad head. Loss: L1 on the non-padded actions + 10
x KL to the unit Gaussian (+ BCE on is-pad).

fp32, batch 24, AdamW (lr 1e-4, backbone lr 1e-5, weight decay 1e-4) in two parameter groups. Phases:
the first step; 4 more steps; a no_grad rollout of 25 control steps for 4 environments with the latent
set to zero (the CVAE encoder skipped) and temporal ensembling (exponential weights, k 0.01) over the
chunks predicted so far, kept in a (T, T + 100, 14) buffer on the device; then 3 steps under fp16
autocast with torch.amp.GradScaler (unscale_, clip at 10, step, update). 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18903)
if SMALL:
    B, STEPS, H, W, D, FF, ROLL, N_ENV, AMP_STEPS = 2, 1, 64, 96, 64, 128, 3, 2, 1
else:
    B, STEPS, H, W, D, FF, ROLL, N_ENV, AMP_STEPS = 24, 4, 240, 320, 512, 3200, 25, 4, 3
CHUNK, QPOS, LATENT, CAMS, HEADS = 100, 14, 32, 3, 8
device = "cuda" if torch.cuda.is_available() else "cpu"


class FrozenBatchNorm2d(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def forward(self, x):
        scale = self.weight * (self.running_var + 1e-5).rsqrt()
        bias = self.bias - self.running_mean * scale
        return x * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)


def sine_pos_embed(h, w, dim, dev, temperature=10000):
    npf = dim // 2
    y = torch.arange(1, h + 1, dtype=torch.float32, device=dev)[:, None].expand(h, w)
    x = torch.arange(1, w + 1, dtype=torch.float32, device=dev)[None, :].expand(h, w)
    scale = 2 * math.pi
    y = y / (h + 1e-6) * scale
    x = x / (w + 1e-6) * scale
    dim_t = torch.arange(npf, dtype=torch.float32, device=dev)
    dim_t = temperature ** (2 * (dim_t // 2) / npf)
    px = x[:, :, None] / dim_t
    py = y[:, :, None] / dim_t
    px = torch.stack((px[:, :, 0::2].sin(), px[:, :, 1::2].cos()), dim=3).flatten(2)
    py = torch.stack((py[:, :, 0::2].sin(), py[:, :, 1::2].cos()), dim=3).flatten(2)
    return torch.cat((py, px), dim=2).permute(2, 0, 1)  # (dim, h, w)


class ACTPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet18(weights=None, norm_layer=FrozenBatchNorm2d)
        self.backbone = nn.Sequential(*list(r.children())[:-2])
        self.input_proj = nn.Conv2d(512, D, 1)
        self.transformer = nn.Transformer(
            d_model=D,
            nhead=HEADS,
            num_encoder_layers=4,
            num_decoder_layers=7,
            dim_feedforward=FF,
            dropout=0.1,
        )
        self.query_embed = nn.Embedding(CHUNK, D)
        self.action_head = nn.Linear(D, QPOS)
        self.is_pad_head = nn.Linear(D, 1)
        self.qpos_proj = nn.Linear(QPOS, D)
        self.latent_out_proj = nn.Linear(LATENT, D)
        self.extra_pos = nn.Embedding(2, D)
        # CVAE encoder
        self.cls_embed = nn.Embedding(1, D)
        self.enc_action_proj = nn.Linear(QPOS, D)
        self.enc_joint_proj = nn.Linear(QPOS, D)
        layer = nn.TransformerEncoderLayer(D, HEADS, FF, 0.1)
        self.cvae_encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.latent_proj = nn.Linear(D, LATENT * 2)
        self.register_buffer("enc_pos", self.sinusoid_table(2 + CHUNK, D))
        self.register_buffer("img_mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("img_std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    @staticmethod
    def sinusoid_table(n, d):
        pos = torch.arange(n, dtype=torch.float32)[:, None]
        div = torch.pow(10000, 2 * (torch.arange(d) // 2) / d)
        table = pos / div
        table[:, 0::2] = table[:, 0::2].sin()
        table[:, 1::2] = table[:, 1::2].cos()
        return table[:, None, :]  # (n, 1, d)

    def forward(self, qpos, images, actions=None, is_pad=None):
        bs = qpos.shape[0]
        if actions is not None:
            cls = self.cls_embed.weight[None].expand(bs, 1, D)
            tokens = torch.cat(
                [cls, self.enc_joint_proj(qpos)[:, None], self.enc_action_proj(actions)], dim=1
            )
            tokens = tokens.permute(1, 0, 2) + self.enc_pos
            pad = torch.cat([torch.zeros(bs, 2, dtype=torch.bool, device=qpos.device), is_pad], dim=1)
            out = self.cvae_encoder(tokens, src_key_padding_mask=pad)[0]
            mu, logvar = self.latent_proj(out).chunk(2, dim=-1)
            latent = mu + (logvar / 2).exp() * torch.randn_like(mu)
        else:
            mu = logvar = None
            latent = torch.zeros(bs, LATENT, device=qpos.device)
        imgs = (images.flatten(0, 1) - self.img_mean) / self.img_std
        feat = self.input_proj(self.backbone(imgs))  # (bs*cams, D, h, w)
        _, _, h, w = feat.shape
        feat = feat + sine_pos_embed(h, w, D, feat.device)[None]
        src = feat.view(bs, CAMS, D, h * w).permute(1, 3, 0, 2).reshape(CAMS * h * w, bs, D)
        extra = (
            torch.stack([self.latent_out_proj(latent), self.qpos_proj(qpos)], dim=0)
            + self.extra_pos.weight[:, None]
        )
        src = torch.cat([extra, src], dim=0)
        tgt = self.query_embed.weight[:, None].expand(CHUNK, bs, D)
        hs = self.transformer(src, tgt).transpose(0, 1)
        return self.action_head(hs), self.is_pad_head(hs), mu, logvar


def kl_divergence(mu, logvar):
    return (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp())).sum(1).mean()


policy = ACTPolicy().to(device)
backbone = [p for n, p in policy.named_parameters() if n.startswith("backbone") and p.requires_grad]
rest = [p for n, p in policy.named_parameters() if not n.startswith("backbone") and p.requires_grad]
opt = torch.optim.AdamW([{"params": rest}, {"params": backbone, "lr": 1e-5}], lr=1e-4, weight_decay=1e-4)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M")
if device == "cuda":
    print(f"policy {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(bsz):
    images = torch.rand(bsz, CAMS, 3, H, W, device=device)
    qpos = torch.randn(bsz, QPOS, device=device)
    actions = torch.randn(bsz, CHUNK, QPOS, device=device)
    lengths = torch.randint(CHUNK // 2, CHUNK + 1, (bsz,), device=device)
    is_pad = torch.arange(CHUNK, device=device)[None] >= lengths[:, None]
    return images, qpos, actions, is_pad


def compute_loss(images, qpos, actions, is_pad):
    a_hat, pad_hat, mu, logvar = policy(qpos, images, actions, is_pad)
    l1 = (F.l1_loss(actions, a_hat.float(), reduction="none") * ~is_pad[..., None]).mean()
    pad_loss = F.binary_cross_entropy_with_logits(pad_hat.squeeze(-1).float(), is_pad.float())
    kl = kl_divergence(mu.float(), logvar.float())
    return l1 + 10.0 * kl + pad_loss, l1, kl


def train_step():
    loss, l1, kl = compute_loss(*make_batch(B))
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item(), l1.item(), kl.item()


policy.train()
loss, l1, kl = train_step()
print(f"step 0 loss {loss:.4f} l1 {l1:.4f} kl {kl:.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _step in range(1, STEPS + 1):
    loss, l1, kl = train_step()
print(f"step {STEPS} loss {loss:.4f} l1 {l1:.4f} kl {kl:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

policy.eval()
all_actions = torch.zeros(ROLL, N_ENV, ROLL + CHUNK, QPOS, device=device)
executed = []
with torch.no_grad():
    for t in range(ROLL):
        qpos = torch.randn(N_ENV, QPOS, device=device)
        images = torch.rand(N_ENV, CAMS, 3, H, W, device=device)
        a_hat, _, _, _ = policy(qpos, images)
        all_actions[t, :, t : t + CHUNK] = a_hat
        cands = all_actions[: t + 1, :, t]  # (t+1, N_ENV, QPOS)
        populated = cands.abs().sum(-1).ne(0).all(-1)
        cands = cands[populated]
        weights = torch.exp(-0.01 * torch.arange(cands.shape[0], device=device, dtype=torch.float32))
        weights = (weights / weights.sum())[:, None, None]
        executed.append((cands * weights).sum(0).cpu())
print(f"rollout actions {torch.stack(executed).shape} mean {torch.stack(executed).mean():.4f}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

policy.train()
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
for step in range(AMP_STEPS):
    images, qpos, actions, is_pad = make_batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        loss, l1, kl = compute_loss(images, qpos, actions, is_pad)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    gn = torch.nn.utils.clip_grad_norm_(policy.parameters(), 10.0)
    scaler.step(opt)
    scaler.update()
    print(f"fp16 step {step} loss {loss.item():.4f} grad norm {gn.item():.3f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"fp16 allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
