"""MoCo v3 with a ViT-S/16 of 12 heads (written after facebookresearch/moco-v3's vits.py, builder.py and
main_moco.py): a timm VisionTransformer whose position embedding is the fixed 2D sin-cos table
(requires_grad off) and whose patch projection is frozen (the random-patch-projection trick),
its head replaced by the 3-layer 4,096-wide projector to 256 (BatchNorm1d, the last without
affine), a 2-layer predictor, the momentum encoder a deep copy with requires_grad off updated out
of place (`param_m.data = param_m.data * m + param_b.data * (1 - m)`, m 0.99), the symmetric loss
ctr(q1, k2) + ctr(q2, k1) with temperature 0.2 (normalised features, `einsum` logits, cross-entropy
times 2T); bf16 autocast, LAMB written by hand after cybertronai/pytorch-lamb (Adam moments, the
update's and the weight's norms and their trust ratio kept on the device by `torch.where`, weight
decay 0.1, the learning rate warmed up), batch 256 of two 224 crops; 3 steps; then the momentum
encoder's class-token features of 1,024 images at batch 512 under inference_mode; 5 phases."""

import copy
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13606)
if SMALL:
    B, IMG, MLP, DIM, N_EVAL, EB = 8, 64, 256, 64, 16, 8
    vit = dict(embed_dim=96, depth=2, num_heads=2)
else:
    B, IMG, MLP, DIM, N_EVAL, EB = 256, 224, 4096, 256, 1024, 512
    vit = dict(embed_dim=384, depth=12, num_heads=12)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class VisionTransformerMoCo(VisionTransformer):
    def __init__(self, stop_grad_conv1=True, **kwargs):
        super().__init__(**kwargs)
        self.build_2d_sincos_position_embedding()
        if stop_grad_conv1:
            self.patch_embed.proj.weight.requires_grad = False
            self.patch_embed.proj.bias.requires_grad = False

    def build_2d_sincos_position_embedding(self, temperature=10000.0):
        h, w = self.patch_embed.grid_size
        grid_w = torch.arange(w, dtype=torch.float32)
        grid_h = torch.arange(h, dtype=torch.float32)
        grid_w, grid_h = torch.meshgrid(grid_w, grid_h, indexing="ij")
        pos_dim = self.embed_dim // 4
        omega = torch.arange(pos_dim, dtype=torch.float32) / pos_dim
        omega = 1.0 / (temperature**omega)
        out_w = torch.einsum("m,d->md", [grid_w.flatten(), omega])
        out_h = torch.einsum("m,d->md", [grid_h.flatten(), omega])
        pos_emb = torch.cat([torch.sin(out_w), torch.cos(out_w), torch.sin(out_h), torch.cos(out_h)], dim=1)[
            None, :, :
        ]
        pe_token = torch.zeros([1, 1, self.embed_dim], dtype=torch.float32)
        self.pos_embed = nn.Parameter(torch.cat([pe_token, pos_emb], dim=1))
        self.pos_embed.requires_grad = False


def build_mlp(num_layers, input_dim, mlp_dim, output_dim, last_bn=True):
    mlp = []
    for layer in range(num_layers):
        dim1 = input_dim if layer == 0 else mlp_dim
        dim2 = output_dim if layer == num_layers - 1 else mlp_dim
        mlp.append(nn.Linear(dim1, dim2, bias=False))
        if layer < num_layers - 1:
            mlp.append(nn.BatchNorm1d(dim2))
            mlp.append(nn.ReLU(inplace=True))
        elif last_bn:
            mlp.append(nn.BatchNorm1d(dim2, affine=False))
    return nn.Sequential(*mlp)


class MoCo_ViT(nn.Module):
    def __init__(self, dim=256, mlp_dim=4096, T=0.2):
        super().__init__()
        self.T = T
        self.base_encoder = VisionTransformerMoCo(img_size=IMG, patch_size=16, num_classes=dim, **vit)
        hidden_dim = self.base_encoder.head.weight.shape[1]
        del self.base_encoder.head
        self.base_encoder.head = build_mlp(3, hidden_dim, mlp_dim, dim)
        self.momentum_encoder = copy.deepcopy(self.base_encoder)
        self.predictor = build_mlp(2, dim, mlp_dim, dim)
        for param_m in self.momentum_encoder.parameters():
            param_m.requires_grad = False

    @torch.no_grad()
    def _update_momentum_encoder(self, m):
        for param_b, param_m in zip(
            self.base_encoder.parameters(), self.momentum_encoder.parameters(), strict=False
        ):
            param_m.data = param_m.data * m + param_b.data * (1.0 - m)

    def contrastive_loss(self, q, k):
        q = nn.functional.normalize(q, dim=1)
        k = nn.functional.normalize(k, dim=1)
        logits = torch.einsum("nc,mc->nm", [q, k]) / self.T
        N = logits.shape[0]
        labels = torch.arange(N, dtype=torch.long, device=logits.device)
        return nn.CrossEntropyLoss()(logits, labels) * (2 * self.T)

    def forward(self, x1, x2, m):
        q1 = self.predictor(self.base_encoder(x1))
        q2 = self.predictor(self.base_encoder(x2))
        with torch.no_grad():
            self._update_momentum_encoder(m)
            k1 = self.momentum_encoder(x1)
            k2 = self.momentum_encoder(x2)
        return self.contrastive_loss(q1, k2) + self.contrastive_loss(q2, k1)


class Lamb(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.data
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p.data)
                    state["exp_avg_sq"] = torch.zeros_like(p.data)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                beta1, beta2 = group["betas"]
                state["step"] += 1
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                step_size = group["lr"]
                weight_norm = p.data.pow(2).sum().sqrt().clamp(0, 10)
                adam_step = exp_avg / exp_avg_sq.sqrt().add(group["eps"])
                if group["weight_decay"] != 0:
                    adam_step.add_(p.data, alpha=group["weight_decay"])
                adam_norm = adam_step.pow(2).sum().sqrt()
                trust_ratio = torch.where((weight_norm == 0) | (adam_norm == 0), 1.0, weight_norm / adam_norm)
                state["trust_ratio"] = trust_ratio
                p.data.add_(adam_step * trust_ratio, alpha=-step_size)


model = MoCo_ViT(DIM, MLP).to(device)
optimizer = Lamb([p for p in model.parameters() if p.requires_grad], lr=1.5e-4 * B / 256, weight_decay=0.1)
mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
base_lr = 1.5e-4 * B / 256
for step in range(3):
    lr = base_lr * (step + 1) / 40
    for g in optimizer.param_groups:
        g["lr"] = lr
    m = 1.0 - 0.5 * (1.0 + math.cos(math.pi * step / 300)) * (1.0 - 0.99)
    x1 = (torch.rand(B, 3, IMG, IMG, device=device) - mean) / std
    x2 = (torch.rand(B, 3, IMG, IMG, device=device) - mean) / std
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(x1, x2, m)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} m {m:.5f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del x1, x2, loss
encoder = model.momentum_encoder
encoder.head = nn.Identity()
encoder.eval()
feats = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _i in range(0, N_EVAL, EB):
        feats.append(encoder((torch.rand(EB, 3, IMG, IMG, device=device) - mean) / std).float())
    feats = F.normalize(torch.cat(feats), dim=-1)
    sim = feats @ feats.T
if device == "cuda":
    print(
        f"features {tuple(feats.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
