"""DINO self-distillation after facebookresearch/dino with a timm ViT-S/16, then a linear-probe sweep.

Student and teacher: timm vit_small_patch16_224 (pretrained=False, num_classes=0, dynamic_img_size=True,
drop_path_rate 0.1 for the student) + DINOHead (MLP 384 -> 2048 -> 2048 -> 256 with GELU, L2
normalisation, then a weight-normalised Linear 256 -> 65,536 via torch.nn.utils.parametrizations.weight_norm
with its magnitude frozen). The teacher is a deepcopy of the student with requires_grad_(False), updated by
EMA (momentum 0.996) with torch._foreach_mul_ / _foreach_add_. The student uses timm's
set_grad_checkpointing(True). Multi-crop: 2 global crops of 224 and 4 local crops of 96 for a batch of
48 images drawn on the device (crops by slicing and F.interpolate); the MultiCropWrapper runs the
backbone once per resolution (torch.cat of same-size crops) and the head once on all [CLS] features.
DINO loss with a centre buffer (momentum 0.9), teacher temperature 0.04, student 0.1, over all pairs of
teacher global / student crops but the same view. bf16 autocast, AdamW (lr 5e-4 * 48 / 256, weight
decay 0.04 on weights only, foreach default), clip_grad_norm_ 3.0, and the last layer's gradients
cancelled (p.grad = None) during the first epoch.

Then the teacher backbone is converted with .half() and encodes 2,048 images under torch.inference_mode at
batch 256 (concatenation of the [CLS] token and the mean of the patch tokens, from
forward_features, 768-d, fp32 on the device); a sweep of 4 linear classifiers 768 -> 1000 (one per
learning rate) is trained together with torch.func.stack_module_state + vmap(functional_call), full
batch, 10 steps of hand-written SGD on the stacked parameters.

Phases: DINO's first step; 2 more steps; the half-precision feature extraction; the vmap probe sweep. 4
phases."""

import copy
import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, stack_module_state

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2036)
if SMALL:
    B, GLOBAL, LOCAL, N_LOCAL, OUT_DIM, STEPS, FEAT_N, CHUNK = 2, 64, 32, 2, 1024, 1, 32, 16
else:
    B, GLOBAL, LOCAL, N_LOCAL, OUT_DIM, STEPS, FEAT_N, CHUNK = 48, 224, 96, 4, 65536, 2, 2048, 256
LRS = [1e-3, 3e-3, 1e-2, 3e-2]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class DINOHead(nn.Module):
    def __init__(self, in_dim, out_dim, hidden_dim=2048, bottleneck_dim=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, bottleneck_dim)
        )
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        self.last_layer = nn.utils.parametrizations.weight_norm(nn.Linear(bottleneck_dim, out_dim, bias=False))
        self.last_layer.parametrizations.weight.original0.data.fill_(1)
        self.last_layer.parametrizations.weight.original0.requires_grad = False

    def forward(self, x):
        x = self.mlp(x)
        x = F.normalize(x, dim=-1, p=2)
        return self.last_layer(x)


class MultiCropWrapper(nn.Module):
    def __init__(self, backbone, head):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, crops):
        sizes = torch.tensor([c.shape[-1] for c in crops])
        idx_crops = torch.cumsum(torch.unique_consecutive(sizes, return_counts=True)[1], 0)
        start, output = 0, []
        for end in idx_crops.tolist():
            output.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        return self.head(torch.cat(output))


class DINOLoss(nn.Module):
    def __init__(self, out_dim, ncrops, student_temp=0.1, teacher_temp=0.04, center_momentum=0.9):
        super().__init__()
        self.student_temp, self.teacher_temp, self.center_momentum, self.ncrops = student_temp, teacher_temp, center_momentum, ncrops
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
        self.update_center(teacher_output)
        return total_loss / n_loss_terms

    @torch.no_grad()
    def update_center(self, teacher_output):
        batch_center = torch.sum(teacher_output, dim=0, keepdim=True) / len(teacher_output)
        self.center = self.center * self.center_momentum + batch_center * (1 - self.center_momentum)


def vit(drop_path):
    return timm.create_model(
        "vit_small_patch16_224", pretrained=False, num_classes=0, dynamic_img_size=True, drop_path_rate=drop_path
    )


student = MultiCropWrapper(vit(0.1), DINOHead(384, OUT_DIM)).to(device)
teacher = MultiCropWrapper(vit(0.0), DINOHead(384, OUT_DIM)).to(device)
teacher.load_state_dict(student.state_dict())
teacher.requires_grad_(False)
student.backbone.set_grad_checkpointing(True)
dino_loss = DINOLoss(OUT_DIM, 2 + N_LOCAL).to(device)

regularized, not_regularized = [], []
for name, p in student.named_parameters():
    if not p.requires_grad:
        continue
    (not_regularized if name.endswith(".bias") or p.ndim == 1 else regularized).append(p)
opt = torch.optim.AdamW([{"params": regularized, "weight_decay": 0.04}, {"params": not_regularized, "weight_decay": 0.0}], lr=5e-4 * B / 256)
student_params = [p for p in student.parameters()]
teacher_params = [p for p in teacher.parameters()]
print(f"student params {sum(p.numel() for p in student_params) / 1e6:.1f}M")


def multi_crop(x):
    crops = []
    for scale, size, count in ((0.7, GLOBAL, 2), (0.3, LOCAL, N_LOCAL)):
        for _ in range(count):
            side = int(x.shape[-1] * scale ** 0.5)
            top, left = torch.randint(0, x.shape[-1] - side + 1, (2,)).tolist()
            crop = F.interpolate(x[:, :, top : top + side, left : left + side], size=(size, size), mode="bicubic", align_corners=False)
            flip = torch.rand(x.shape[0], 1, 1, 1, device=x.device) < 0.5
            crops.append(((torch.where(flip, crop.flip(-1), crop)).clamp(0, 1) - 0.45) / 0.25)
    return crops


def train_step(epoch):
    student.train()
    x = torch.rand(B, 3, 256, 256, device=device)
    crops = multi_crop(x)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        teacher_output = teacher(crops[:2])
        student_output = student(crops)
        loss = dino_loss(student_output, teacher_output)
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 3.0)
    if epoch == 0:
        for n, p in student.named_parameters():
            if "last_layer" in n:
                p.grad = None
    opt.step()
    with torch.no_grad():
        m = 0.996
        torch._foreach_mul_(teacher_params, m)
        torch._foreach_add_(teacher_params, student_params, alpha=1 - m)
    return loss.item()


print(f"step 0 loss {train_step(0):.4f}")
report("first step")
for step in range(STEPS):
    loss = train_step(0)
    print(f"step {step + 1} loss {loss:.4f}")
report("train")

backbone = teacher.backbone.half().eval()
feats, labels = [], []
with torch.inference_mode():
    for i in range(0, FEAT_N, CHUNK):
        x = ((torch.rand(CHUNK, 3, GLOBAL, GLOBAL, device=device) - 0.45) / 0.25).half()
        tokens = backbone.forward_features(x)
        f = torch.cat([tokens[:, 0], tokens[:, backbone.num_prefix_tokens :].mean(1)], dim=-1)
        feats.append(f.float())
        labels.append(torch.randint(0, 1000, (CHUNK,), device=device))
feats = torch.cat(feats)
labels = torch.cat(labels)
print(f"features {tuple(feats.shape)}")
report("features")

heads = [nn.Linear(feats.shape[1], 1000).to(device) for _ in LRS]
for h in heads:
    nn.init.normal_(h.weight, std=0.01)
    nn.init.zeros_(h.bias)
params, buffers = stack_module_state(heads)
base = copy.deepcopy(heads[0]).to("meta")
lrs = torch.tensor(LRS, device=device)


def fmodel(p, b, x):
    return functional_call(base, (p, b), (x,))


for step in range(10):
    logits = torch.vmap(fmodel, in_dims=(0, 0, None))(params, buffers, feats)
    losses = torch.stack([F.cross_entropy(logits[i], labels) for i in range(len(LRS))])
    grads = torch.autograd.grad(losses.sum(), list(params.values()))
    with torch.no_grad():
        for (k, p), g in zip(params.items(), grads):
            p.sub_(g * lrs.view(-1, *([1] * (g.ndim - 1))))
print("probe losses " + " ".join(f"{v:.4f}" for v in losses.tolist()))
if device == "cuda":
    print(f"probe allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
