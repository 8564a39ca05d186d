"""DGCNN for point-cloud classification as WangYueFt/dgcnn (pytorch/model.py, main.py, util.py)
writes it: knn by the pairwise distance -||xi||^2 + 2 xi.xj - ||xj||^2 (a matmul) and topk(k=20),
get_graph_feature gathering each point's neighbours from the flattened (B*N, C) features with
idx + arange(B) * N and concatenating (x_j - x_i, x_i) into (B, 2C, N, k), four EdgeConv layers
(64, 64, 128, 256 channels: 1 x 1 Conv2d without bias, BatchNorm2d, LeakyReLU(0.2), max over the
neighbours), the four outputs concatenated into a 1 x 1 Conv1d to 1,024, global max and mean
pooling, then 2,048 -> 512 -> 256 -> 40 with BatchNorm1d, LeakyReLU and dropout 0.5; the loss is
cal_loss's label smoothing (eps 0.2, one_hot by scatter, log_softmax). fp16 autocast with
GradScaler, SGD (lr 0.1, momentum 0.9, weight decay 1e-4) with CosineAnnealingLR to 1e-3, batch
32 of 1,024 points (random anisotropic scaling and translation), 3 steps (each its own phase),
then evaluation under no_grad at batch 64 with the knn recomputed at every layer; 4 phases."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16204)
if SMALL:
    B, N_POINTS, K, EMB, EVAL_B, STEPS = 2, 64, 8, 64, 2, 3
else:
    B, N_POINTS, K, EMB, EVAL_B, STEPS = 32, 1024, 20, 1024, 64, 3
NUM_CLASS = 40
device = "cuda" if torch.cuda.is_available() else "cpu"


def knn(x, k):
    inner = -2 * torch.matmul(x.transpose(2, 1), x)
    xx = torch.sum(x**2, dim=1, keepdim=True)
    pairwise_distance = -xx - inner - xx.transpose(2, 1)
    idx = pairwise_distance.topk(k=k, dim=-1)[1]  # (batch_size, num_points, k)
    return idx


def get_graph_feature(x, k=20, idx=None):
    batch_size = x.size(0)
    num_points = x.size(2)
    x = x.view(batch_size, -1, num_points)
    if idx is None:
        idx = knn(x, k=k)
    idx_base = torch.arange(0, batch_size, device=x.device).view(-1, 1, 1) * num_points
    idx = idx + idx_base
    idx = idx.view(-1)
    _, num_dims, _ = x.size()
    x = x.transpose(2, 1).contiguous()
    feature = x.view(batch_size * num_points, -1)[idx, :]
    feature = feature.view(batch_size, num_points, k, num_dims)
    x = x.view(batch_size, num_points, 1, num_dims).repeat(1, 1, k, 1)
    feature = torch.cat((feature - x, x), dim=3).permute(0, 3, 1, 2).contiguous()
    return feature


class DGCNN(nn.Module):
    def __init__(self, k=20, emb_dims=1024, dropout=0.5, output_channels=40):
        super().__init__()
        self.k = k
        self.bn1 = nn.BatchNorm2d(64)
        self.bn2 = nn.BatchNorm2d(64)
        self.bn3 = nn.BatchNorm2d(128)
        self.bn4 = nn.BatchNorm2d(256)
        self.bn5 = nn.BatchNorm1d(emb_dims)
        self.conv1 = nn.Sequential(
            nn.Conv2d(6, 64, kernel_size=1, bias=False), self.bn1, nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(64 * 2, 64, kernel_size=1, bias=False), self.bn2, nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv3 = nn.Sequential(
            nn.Conv2d(64 * 2, 128, kernel_size=1, bias=False), self.bn3, nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv4 = nn.Sequential(
            nn.Conv2d(128 * 2, 256, kernel_size=1, bias=False), self.bn4, nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv5 = nn.Sequential(
            nn.Conv1d(512, emb_dims, kernel_size=1, bias=False), self.bn5, nn.LeakyReLU(negative_slope=0.2)
        )
        self.linear1 = nn.Linear(emb_dims * 2, 512, bias=False)
        self.bn6 = nn.BatchNorm1d(512)
        self.dp1 = nn.Dropout(p=dropout)
        self.linear2 = nn.Linear(512, 256)
        self.bn7 = nn.BatchNorm1d(256)
        self.dp2 = nn.Dropout(p=dropout)
        self.linear3 = nn.Linear(256, output_channels)

    def forward(self, x):
        batch_size = x.size(0)
        x = get_graph_feature(x, k=self.k)
        x = self.conv1(x)
        x1 = x.max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x1, k=self.k)
        x = self.conv2(x)
        x2 = x.max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x2, k=self.k)
        x = self.conv3(x)
        x3 = x.max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x3, k=self.k)
        x = self.conv4(x)
        x4 = x.max(dim=-1, keepdim=False)[0]
        x = torch.cat((x1, x2, x3, x4), dim=1)
        x = self.conv5(x)
        x1 = F.adaptive_max_pool1d(x, 1).view(batch_size, -1)
        x2 = F.adaptive_avg_pool1d(x, 1).view(batch_size, -1)
        x = torch.cat((x1, x2), 1)
        x = F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2)
        x = self.dp1(x)
        x = F.leaky_relu(self.bn7(self.linear2(x)), negative_slope=0.2)
        x = self.dp2(x)
        x = self.linear3(x)
        return x


def cal_loss(pred, gold, smoothing=True):
    gold = gold.contiguous().view(-1)
    if smoothing:
        eps = 0.2
        n_class = pred.size(1)
        one_hot = torch.zeros_like(pred).scatter(1, gold.view(-1, 1), 1)
        one_hot = one_hot * (1 - eps) + (1 - one_hot) * eps / (n_class - 1)
        log_prb = F.log_softmax(pred, dim=1)
        loss = -(one_hot * log_prb).sum(dim=1).mean()
    else:
        loss = F.cross_entropy(pred, gold, reduction="mean")
    return loss


def translate_pointcloud(pointcloud):
    xyz1 = np.random.uniform(low=2.0 / 3.0, high=3.0 / 2.0, size=[3])
    xyz2 = np.random.uniform(low=-0.2, high=0.2, size=[3])
    return np.add(np.multiply(pointcloud, xyz1), xyz2).astype("float32")


np.random.seed(16204)
model = DGCNN(k=K, emb_dims=EMB, output_channels=NUM_CLASS).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.001 * 100, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 250, eta_min=0.001)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
clouds = np.random.randn(STEPS * B, N_POINTS, 3).astype("float32")
labels = np.random.randint(0, NUM_CLASS, size=(STEPS * B, 1))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    data = np.stack([translate_pointcloud(p) for p in clouds[step * B : (step + 1) * B]])
    label = labels[step * B : (step + 1) * B]
    data, label = torch.from_numpy(data).to(device), torch.from_numpy(label).to(device).squeeze()
    data = data.permute(0, 2, 1)
    batch_size = data.size()[0]
    opt.zero_grad()
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
        logits = model(data)
        loss = cal_loss(logits, label)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    preds = logits.max(dim=1)[1]
    train_true = label.cpu().numpy()
    train_pred = preds.detach().cpu().numpy()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} acc {(train_true == train_pred).mean():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
scheduler.step()

del logits, loss, preds, data
model.eval()
test_pred = []
with torch.no_grad():
    data = torch.randn(EVAL_B, 3, N_POINTS, device=device)
    with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=device == "cuda"):
        logits = model(data)
    test_pred.append(logits.max(dim=1)[1].cpu().numpy())
if device == "cuda":
    torch.cuda.synchronize()
    print(
        f"eval {np.concatenate(test_pred).shape} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
