"""SimSiam on CIFAR-sized images (written after facebookresearch/simsiam's builder.py and the
CIFAR recipe): a torchvision ResNet-18 with a 3 x 3 stride-1 stem and no max-pool, its fc
replaced by the 3-layer 2,048-wide projector (Linear without bias + BatchNorm1d + ReLU, the last
BatchNorm1d without affine), the 512-wide bottleneck predictor, the symmetric negative cosine
loss with the targets cut by `detach()`; fp32 (TF32 matmuls and convolutions allowed),
channels-last, batch 512 at 32 x 32, SGD (momentum 0.9, weight decay 5e-4) with the predictor's
learning rate held fixed (fix_pred_lr) and a cosine schedule over the others; 4 steps; then the
kNN monitor of the MoCo CIFAR demo in eval mode under no_grad: a feature bank of 10,000 images
at batch 1,000 (normalised, transposed), 2,000 test images scored against it (`mm`, `topk` 200,
`gather` of the bank's labels, one-hot by `scatter`, weighted by exp(sim / 0.1), summed over the
neighbours); 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13605)
B, N_BANK, N_TEST, EB, DIM, PRED = (8, 64, 32, 16, 128, 32) if SMALL else (512, 10000, 2000, 1000, 2048, 512)
K, T, C = (20 if SMALL else 200), 0.1, 10
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class SimSiam(nn.Module):
    def __init__(self, dim=2048, pred_dim=512):
        super().__init__()
        enc = torchvision.models.resnet18(num_classes=dim, zero_init_residual=True)
        enc.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        enc.maxpool = nn.Identity()
        prev_dim = enc.fc.weight.shape[1]
        enc.fc = nn.Sequential(
            nn.Linear(prev_dim, prev_dim, bias=False),
            nn.BatchNorm1d(prev_dim),
            nn.ReLU(inplace=True),
            nn.Linear(prev_dim, prev_dim, bias=False),
            nn.BatchNorm1d(prev_dim),
            nn.ReLU(inplace=True),
            nn.Linear(prev_dim, dim, bias=False),
            nn.BatchNorm1d(dim, affine=False),
        )
        self.encoder = enc
        self.predictor = nn.Sequential(
            nn.Linear(dim, pred_dim, bias=False),
            nn.BatchNorm1d(pred_dim),
            nn.ReLU(inplace=True),
            nn.Linear(pred_dim, dim),
        )

    def forward(self, x1, x2):
        z1 = self.encoder(x1)
        z2 = self.encoder(x2)
        p1 = self.predictor(z1)
        p2 = self.predictor(z2)
        return p1, p2, z1.detach(), z2.detach()


model = SimSiam(DIM, PRED).to(device, memory_format=torch.channels_last)
criterion = nn.CosineSimilarity(dim=1).to(device)
init_lr = 0.06 * B / 256
optim_params = [
    {"params": model.encoder.parameters(), "fix_lr": False},
    {"params": model.predictor.parameters(), "fix_lr": True},
]
optimizer = torch.optim.SGD(optim_params, init_lr, momentum=0.9, weight_decay=5e-4)
mean = torch.tensor([0.4914, 0.4822, 0.4465], device=device).view(1, 3, 1, 1)
std = torch.tensor([0.247, 0.243, 0.261], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def view(n):
    return ((torch.rand(n, 3, 32, 32, device=device) - mean) / std).contiguous(
        memory_format=torch.channels_last
    )


model.train()
for step in range(4):
    cur_lr = init_lr * 0.5 * (1.0 + math.cos(math.pi * step / 800))
    for g in optimizer.param_groups:
        g["lr"] = init_lr if g["fix_lr"] else cur_lr
    p1, p2, z1, z2 = model(x1=view(B), x2=view(B))
    loss = -(criterion(p1, z2).mean() + criterion(p2, z1).mean()) * 0.5
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del p1, p2, z1, z2, loss
net = model.encoder
net.fc = nn.Identity()
net.eval()
with torch.no_grad():
    feature_bank = []
    for _i in range(0, N_BANK, EB):
        feature_bank.append(F.normalize(net(view(EB)), dim=1))
    feature_bank = torch.cat(feature_bank, dim=0).t().contiguous()
    feature_labels = torch.randint(0, C, (N_BANK,), device=device)
    total_top1 = torch.zeros((), device=device)
    for _i in range(0, N_TEST, EB):
        target = torch.randint(0, C, (EB,), device=device)
        feature = F.normalize(net(view(EB)), dim=1)
        sim_matrix = torch.mm(feature, feature_bank)
        sim_weight, sim_indices = sim_matrix.topk(k=K, dim=-1)
        sim_labels = torch.gather(feature_labels.expand(feature.size(0), -1), dim=-1, index=sim_indices)
        sim_weight = (sim_weight / T).exp()
        one_hot_label = torch.zeros(feature.size(0) * K, C, device=sim_labels.device)
        one_hot_label = one_hot_label.scatter(dim=-1, index=sim_labels.view(-1, 1), value=1.0)
        pred_scores = torch.sum(
            one_hot_label.view(feature.size(0), -1, C) * sim_weight.unsqueeze(dim=-1), dim=1
        )
        pred_labels = pred_scores.argsort(dim=-1, descending=True)
        total_top1 += (pred_labels[:, :1] == target.unsqueeze(dim=-1)).any(dim=-1).float().sum()
if device == "cuda":
    print(
        f"knn top1 {total_top1.item() / N_TEST:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
