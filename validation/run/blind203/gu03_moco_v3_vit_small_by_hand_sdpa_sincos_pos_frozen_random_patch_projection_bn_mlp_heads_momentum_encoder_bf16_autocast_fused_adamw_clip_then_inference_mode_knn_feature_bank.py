"""MoCo v3 with a ViT-Small written by hand, then a weighted kNN evaluation on a feature bank.

Encoder: ViT-S/16 at 224 px (patch embedding Conv2d 3 -> 384 kernel 16 stride 16, frozen as in MoCo
v3's random patch projection; [CLS] token; fixed 2-D sin-cos position embedding as a buffer; 12 pre-norm
blocks of 6 heads with F.scaled_dot_product_attention, GELU MLP 1536; final LayerNorm), the [CLS]
output fed to a projector 384 -> 4096 -> 4096 -> 256 (BatchNorm1d + ReLU, last BatchNorm1d without
affine) and a predictor 256 -> 4096 -> 256. The momentum encoder is a deepcopy of encoder + projector
(requires_grad_(False)), updated by a per-parameter loop pm.mul_(m).add_(pb, alpha=1 - m) with m 0.99.
Loss: symmetric InfoNCE on the in-batch keys, logits q @ k.T / 0.2 in fp32, cross_entropy against
arange(N), times 2T. Batch 128 images drawn on the device, two views each (random flip, brightness,
noise). bf16 autocast, AdamW(fused=True) lr 1.5e-4 * 128 / 256, weight decay 0.1, betas (0.9, 0.95),
clip_grad_norm_ 1.0.

Phases: the first step (AdamW state created); 2 more steps; a kNN evaluation under
torch.inference_mode: 2,048 bank images encoded by the momentum encoder's backbone at batch 256 into
L2-normalised fp16 [CLS] features, then 512 queries classified by the 20 nearest neighbours with
exp(sim / 0.07) weights over 100 classes (one-hot scatter_ and a weighted sum). 3 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2033)
if SMALL:
    B, RES, DEPTH, STEPS, BANK, QUERIES, CHUNK = 4, 64, 2, 1, 64, 16, 32
else:
    B, RES, DEPTH, STEPS, BANK, QUERIES, CHUNK = 128, 224, 12, 2, 2048, 512, 256
DIM, HEADS, PATCH, CLASSES, K = 384, 6, 16, 100, 20
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def sincos_pos_embed(grid, dim, temperature=10000.0):
    gh, gw = torch.meshgrid(torch.arange(grid, dtype=torch.float32), torch.arange(grid, dtype=torch.float32), indexing="ij")
    pos_dim = dim // 4
    omega = 1.0 / temperature ** (torch.arange(pos_dim, dtype=torch.float32) / pos_dim)
    out_w = gw.flatten()[:, None] * omega[None]
    out_h = gh.flatten()[:, None] * omega[None]
    pe = torch.cat([torch.sin(out_w), torch.cos(out_w), torch.sin(out_h), torch.cos(out_h)], dim=1)
    return torch.cat([torch.zeros(1, dim), pe], dim=0).unsqueeze(0)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, DIM, PATCH, PATCH)
        self.patch_embed.requires_grad_(False)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, DIM))
        nn.init.normal_(self.cls_token, std=1e-6)
        self.register_buffer("pos_embed", sincos_pos_embed(RES // PATCH, DIM))
        self.blocks = nn.Sequential(*[Block(DIM, HEADS) for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(DIM, eps=1e-6)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.norm(self.blocks(x))[:, 0]


def mlp(num_layers, d_in, d_mlp, d_out, last_bn=True):
    layers = []
    for i in range(num_layers):
        a = d_in if i == 0 else d_mlp
        b = d_out if i == num_layers - 1 else d_mlp
        layers.append(nn.Linear(a, b, bias=False))
        if i < num_layers - 1:
            layers += [nn.BatchNorm1d(b), nn.ReLU(inplace=True)]
        elif last_bn:
            layers.append(nn.BatchNorm1d(b, affine=False))
    return nn.Sequential(*layers)


class MoCoV3(nn.Module):
    def __init__(self, T=0.2, m=0.99):
        super().__init__()
        self.T, self.m = T, m
        self.base_encoder = nn.Sequential(ViT(), mlp(3, DIM, 4096, 256))
        self.momentum_encoder = copy.deepcopy(self.base_encoder).requires_grad_(False)
        self.predictor = mlp(2, 256, 4096, 256, last_bn=False)

    @torch.no_grad()
    def update_momentum_encoder(self):
        for pb, pm in zip(self.base_encoder.parameters(), self.momentum_encoder.parameters()):
            pm.mul_(self.m).add_(pb.detach(), alpha=1 - self.m)

    def contrastive_loss(self, q, k):
        q = F.normalize(q, dim=1)
        k = F.normalize(k, dim=1)
        logits = torch.einsum("nc,mc->nm", [q, k]).float() / self.T
        labels = torch.arange(logits.shape[0], device=logits.device)
        return F.cross_entropy(logits, labels) * (2 * self.T)

    def forward(self, x1, x2):
        q1 = self.predictor(self.base_encoder(x1))
        q2 = self.predictor(self.base_encoder(x2))
        with torch.no_grad():
            self.update_momentum_encoder()
            k1 = self.momentum_encoder(x1)
            k2 = self.momentum_encoder(x2)
        return self.contrastive_loss(q1, k2) + self.contrastive_loss(q2, k1)


def views(x):
    n = x.shape[0]
    flip = torch.rand(n, 1, 1, 1, device=x.device) < 0.5
    x = torch.where(flip, x.flip(-1), x) * torch.empty(n, 1, 1, 1, device=x.device).uniform_(0.6, 1.4)
    return (x + 0.1 * torch.randn_like(x) - 0.45) / 0.25


model = MoCoV3().to(device)
opt = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=1.5e-4 * B / 256, weight_decay=0.1, betas=(0.9, 0.95), fused=amp
)
print(f"trainable {sum(p.numel() for p in model.parameters() if p.requires_grad) / 1e6:.1f}M")


def train_step():
    model.train()
    x = torch.rand(B, 3, RES, RES, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(views(x), views(x))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item()


print(f"step 0 loss {train_step():.4f}")
report("first step")
for step in range(STEPS):
    loss = train_step()
    print(f"step {step + 1} loss {loss:.4f}")
report("train")

encoder = model.momentum_encoder[0]
encoder.eval()
with torch.inference_mode():
    bank, bank_labels = [], []
    for i in range(0, BANK, CHUNK):
        x = (torch.rand(CHUNK, 3, RES, RES, device=device) - 0.45) / 0.25
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            f = encoder(x)
        bank.append(F.normalize(f.float(), dim=1).half())
        bank_labels.append(torch.randint(0, CLASSES, (CHUNK,), device=device))
    bank = torch.cat(bank).t().contiguous()
    bank_labels = torch.cat(bank_labels)
    correct = 0
    for i in range(0, QUERIES, CHUNK):
        x = (torch.rand(CHUNK, 3, RES, RES, device=device) - 0.45) / 0.25
        y = torch.randint(0, CLASSES, (CHUNK,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            f = encoder(x)
        q = F.normalize(f.float(), dim=1).half()
        sim = (q @ bank).float()
        w, idx = sim.topk(K, dim=1)
        nbr = bank_labels[idx]
        one_hot = torch.zeros(CHUNK * K, CLASSES, device=device).scatter_(1, nbr.view(-1, 1), 1.0)
        w = (w / 0.07).exp()
        scores = (one_hot.view(CHUNK, K, CLASSES) * w.unsqueeze(-1)).sum(1)
        correct += (scores.argmax(1) == y).sum().item()
print(f"knn top-1 {correct / QUERIES:.4f}")
if device == "cuda":
    print(f"knn allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
