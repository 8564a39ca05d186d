"""DINO self-distillation as facebookresearch/dino's main_dino.py trains it, written by hand around a
timm ViT-S/16 (dynamic_img_size, so 96 x 96 local crops interpolate the position embedding; drop
path 0.1 in the student): the MultiCropWrapper (crops grouped by resolution through
unique_consecutive's counts, one backbone call per group, outputs concatenated), DINOHead (3-layer
MLP to a 256 bottleneck, L2 normalization, a weight_norm'd 65,536-way last layer with weight_g
frozen), DINOLoss with teacher centering and sharpening (every student crop against each other
global teacher crop, the center's EMA), 2 global 224 crops and 8 local 96 crops of 64 images; fp16
autocast with GradScaler, AdamW with regularized/not-regularized groups, DINO's per-parameter
clip_gradients, the last layer's gradients cancelled in the first epoch, the teacher updated as an
EMA of the student under no_grad, 3 steps; then a k-NN evaluation of the teacher backbone's
features (256 queries against a bank of 1,024, top-20 cosine neighbours, temperature-weighted
votes) under no_grad; 5 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12007)
B, NLOCAL, OUT, NQ, NBANK, K = (2, 2, 1024, 8, 16, 4) if SMALL else (64, 8, 65536, 256, 1024, 20)
GRES, LRES = (64, 32) if SMALL else (224, 96)
ARCH = "vit_tiny_patch16_224" if SMALL else "vit_small_patch16_224"
device = "cuda" if torch.cuda.is_available() else "cpu"


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, hidden_dim=2048, bottleneck_dim=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, hidden_dim),
            nn.GELU(),
            nn.Linear(hidden_dim, bottleneck_dim),
        )
        self.apply(self._init_weights)
        self.last_layer = nn.utils.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        self.last_layer.weight_g.data.fill_(1)
        self.last_layer.weight_g.requires_grad = False

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)

    def forward(self, x):
        x = self.mlp(x)
        x = F.normalize(x, dim=-1, p=2)
        return self.last_layer(x)


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone, self.head = backbone, head

    def forward(self, x):
        if not isinstance(x, list):
            x = [x]
        idx_crops = torch.cumsum(
            torch.unique_consecutive(torch.tensor([inp.shape[-1] for inp in x]), return_counts=True)[1], 0
        )
        start_idx, output = 0, torch.empty(0).to(x[0].device)
        for end_idx in idx_crops:
            _out = self.backbone(torch.cat(x[start_idx:end_idx]))
            output = torch.cat((output, _out))
            start_idx = end_idx
        return self.head(output)


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, teacher_temp=0.04, student_temp=0.1, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp, self.center_momentum, self.ncrops = (
            student_temp,
            teacher_temp,
            center_momentum,
            ncrops,
        )
        self.register_buffer("center", torch.zeros(1, out_dim))

    def forward(self, student_output, teacher_output):
        student_out = (student_output / self.student_temp).chunk(self.ncrops)
        teacher_out = F.softmax((teacher_output - self.center) / self.teacher_temp, dim=-1).detach().chunk(2)
        total_loss, n_loss_terms = 0, 0
        for iq, q in enumerate(teacher_out):
            for v in range(len(student_out)):
                if v == iq:
                    continue
                loss = torch.sum(-q * F.log_softmax(student_out[v], dim=-1), dim=-1)
                total_loss += loss.mean()
                n_loss_terms += 1
        total_loss /= n_loss_terms
        self.update_center(teacher_output)
        return total_loss

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def clip_gradients(model, clip):
    for p in model.parameters():
        if p.grad is not None:
            param_norm = p.grad.data.norm(2)
            clip_coef = clip / (param_norm + 1e-6)
            if clip_coef < 1:
                p.grad.data.mul_(clip_coef)


student = MultiCropWrapper(
    timm.create_model(ARCH, num_classes=0, dynamic_img_size=True, drop_path_rate=0.1),
    DINOHead(384 if not SMALL else 192, OUT),
).to(device)
teacher = MultiCropWrapper(
    timm.create_model(ARCH, num_classes=0, dynamic_img_size=True), DINOHead(384 if not SMALL else 192, OUT)
).to(device)
teacher.load_state_dict(student.state_dict())
for p in teacher.parameters():
    p.requires_grad = False
dino_loss = DINOLoss(OUT, NLOCAL + 2).to(device)
regularized = [
    p
    for n, p in student.named_parameters()
    if p.requires_grad and not (n.endswith(".bias") or len(p.shape) == 1)
]
not_regularized = [
    p for n, p in student.named_parameters() if p.requires_grad and (n.endswith(".bias") or len(p.shape) == 1)
]
optimizer = torch.optim.AdamW(
    [{"params": regularized}, {"params": not_regularized, "weight_decay": 0.0}], lr=5e-4 * B / 256
)
fp16_scaler = torch.amp.GradScaler(device)
for g in optimizer.param_groups[:1]:
    g["weight_decay"] = 0.04
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

student.train()
for it in range(3):
    images = [torch.randn(B, 3, GRES, GRES, device=device) for _ in range(2)]
    images += [torch.randn(B, 3, LRES, LRES, device=device) for _ in range(NLOCAL)]
    with torch.autocast(device, dtype=torch.float16):
        teacher_output = teacher(images[:2])
        student_output = student(images)
        loss = dino_loss(student_output, teacher_output)
    optimizer.zero_grad()
    fp16_scaler.scale(loss).backward()
    fp16_scaler.unscale_(optimizer)
    clip_gradients(student, 3.0)
    for n, p in student.named_parameters():
        if "last_layer" in n:
            p.grad = None
    fp16_scaler.step(optimizer)
    fp16_scaler.update()
    with torch.no_grad():
        m = 0.996
        for param_q, param_k in zip(student.parameters(), teacher.parameters(), strict=True):
            param_k.data.mul_(m).add_((1 - m) * param_q.detach().data)
    if device == "cuda":
        print(
            f"it {it} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, teacher_output, student_output, loss

teacher.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    bank = torch.cat(
        [
            teacher.backbone(torch.randn(256 if not SMALL else 8, 3, GRES, GRES, device=device))
            for _ in range(NBANK // (256 if not SMALL else 8))
        ]
    )
    bank = F.normalize(bank.float(), dim=1)
    bank_labels = torch.randint(0, 1000, (NBANK,), device=device)
    feats = F.normalize(teacher.backbone(torch.randn(NQ, 3, GRES, GRES, device=device)).float(), dim=1)
    sim, idx = (feats @ bank.T).topk(K, dim=1)
    retrieved = torch.gather(bank_labels.view(1, -1).expand(NQ, -1), 1, idx)
    one_hot = torch.zeros(NQ * K, 1000, device=device).scatter_(1, retrieved.view(-1, 1), 1)
    probs = torch.sum((one_hot.view(NQ, -1, 1000) * (sim / 0.07).exp().view(NQ, -1, 1)), 1)
    pred = probs.argmax(1)
if device == "cuda":
    print(
        f"knn {pred.float().mean().item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
