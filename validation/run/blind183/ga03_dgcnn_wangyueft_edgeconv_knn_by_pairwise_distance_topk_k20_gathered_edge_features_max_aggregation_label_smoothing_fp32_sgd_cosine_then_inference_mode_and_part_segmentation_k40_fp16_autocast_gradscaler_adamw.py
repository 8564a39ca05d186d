"""DGCNN after Wang et al. 2019 ("Dynamic Graph CNN for Learning on Point Clouds"), written by hand as in
the WangYueFT/dgcnn repository's pytorch/model.py: knn by the pairwise distance -|x_i|^2 + 2 x_i.x_j -
|x_j|^2 from one matmul and topk(k) over the last dimension, recomputed on each layer's features (the
dynamic graph); get_graph_feature flattening the batch with an index base, gathering the neighbours by
advanced indexing into the (B * N, C) view, and concatenating (x_j - x_i, x_i) into (B, 2C, N, k) edge
features; four EdgeConv layers (Conv2d 1 x 1 without bias, BatchNorm2d, LeakyReLU 0.2, max over the k
neighbours) to 64, 64, 128, 256 channels, their outputs concatenated to 512 and embedded by Conv1d to
1,024, then adaptive max and average pooling concatenated to 2,048 and a 512 -> 256 -> 40 head with
dropout 0.5. Classification on ModelNet40-shaped clouds (1,024 points, k = 20) with the repository's
label-smoothed cross-entropy (eps 0.2), fp32, SGD (lr 0.1, momentum 0.9, weight decay 1e-4) with
CosineAnnealingLR, batch 32: the first step its own phase, then 3 steps; evaluation under
inference_mode at batch 64 (4 batches). Then the part-segmentation network (ShapeNet-part shapes of
2,048 points, k = 40, a 3 x 3 spatial transform net on the first edge features, 64-d category
embedding, per-point head 1,280 -> 256 -> 256 -> 128 -> 50) trained under fp16 autocast with
torch.amp.GradScaler and AdamW (lr 1e-3) at batch 12 for 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18303)
if SMALL:
    B, NPTS, K, STEPS, EVAL_B, EVAL_N, SEG_B, SEG_NPTS, SEG_K, SEG_STEPS = 4, 128, 8, 2, 4, 1, 2, 256, 8, 2
else:
    B, NPTS, K, STEPS, EVAL_B, EVAL_N, SEG_B, SEG_NPTS, SEG_K, SEG_STEPS = (
        32,
        1024,
        20,
        4,
        64,
        4,
        12,
        2048,
        40,
        3,
    )
NCLS, NCAT, NPART = 40, 16, 50
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


def edge_block(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel_size=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.LeakyReLU(negative_slope=0.2),
    )


class DGCNNCls(nn.Module):
    def __init__(self, k=20, emb_dims=1024, output_channels=40):
        super().__init__()
        self.k = k
        self.conv1 = edge_block(6, 64)
        self.conv2 = edge_block(64 * 2, 64)
        self.conv3 = edge_block(64 * 2, 128)
        self.conv4 = edge_block(128 * 2, 256)
        self.conv5 = nn.Sequential(
            nn.Conv1d(512, emb_dims, kernel_size=1, bias=False),
            nn.BatchNorm1d(emb_dims),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.linear1 = nn.Linear(emb_dims * 2, 512, bias=False)
        self.bn6 = nn.BatchNorm1d(512)
        self.dp1 = nn.Dropout(p=0.5)
        self.linear2 = nn.Linear(512, 256)
        self.bn7 = nn.BatchNorm1d(256)
        self.dp2 = nn.Dropout(p=0.5)
        self.linear3 = nn.Linear(256, output_channels)

    def forward(self, x):
        batch_size = x.size(0)
        x = get_graph_feature(x, k=self.k)
        x1 = self.conv1(x).max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x1, k=self.k)
        x2 = self.conv2(x).max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x2, k=self.k)
        x3 = self.conv3(x).max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x3, k=self.k)
        x4 = self.conv4(x).max(dim=-1, keepdim=False)[0]
        x = torch.cat((x1, x2, x3, x4), dim=1)
        x = self.conv5(x)
        x1 = F.adaptive_max_pool1d(x, 1).view(batch_size, -1)
        x2 = F.adaptive_avg_pool1d(x, 1).view(batch_size, -1)
        x = torch.cat((x1, x2), 1)
        x = F.leaky_relu(self.bn6(self.linear1(x)), negative_slope=0.2)
        x = self.dp1(x)
        x = F.leaky_relu(self.bn7(self.linear2(x)), negative_slope=0.2)
        x = self.dp2(x)
        return self.linear3(x)


class TransformNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = edge_block(6, 64)
        self.conv2 = edge_block(64, 128)
        self.conv3 = nn.Sequential(
            nn.Conv1d(128, 1024, kernel_size=1, bias=False),
            nn.BatchNorm1d(1024),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.linear1 = nn.Linear(1024, 512, bias=False)
        self.bn3 = nn.BatchNorm1d(512)
        self.linear2 = nn.Linear(512, 256, bias=False)
        self.bn4 = nn.BatchNorm1d(256)
        self.transform = nn.Linear(256, 3 * 3)
        nn.init.constant_(self.transform.weight, 0)
        nn.init.eye_(self.transform.bias.view(3, 3))

    def forward(self, x):
        batch_size = x.size(0)
        x = self.conv1(x)
        x = self.conv2(x)
        x = x.max(dim=-1, keepdim=False)[0]
        x = self.conv3(x)
        x = x.max(dim=-1, keepdim=False)[0]
        x = F.leaky_relu(self.bn3(self.linear1(x)), negative_slope=0.2)
        x = F.leaky_relu(self.bn4(self.linear2(x)), negative_slope=0.2)
        return self.transform(x).view(batch_size, 3, 3)


class DGCNNPartSeg(nn.Module):
    def __init__(self, seg_num_all, k=40, emb_dims=1024):
        super().__init__()
        self.k = k
        self.transform_net = TransformNet()
        self.conv1 = edge_block(6, 64)
        self.conv2 = nn.Sequential(
            nn.Conv2d(64, 64, kernel_size=1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv3 = edge_block(64 * 2, 64)
        self.conv4 = nn.Sequential(
            nn.Conv2d(64, 64, kernel_size=1, bias=False), nn.BatchNorm2d(64), nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv5 = edge_block(64 * 2, 64)
        self.conv6 = nn.Sequential(
            nn.Conv1d(192, emb_dims, kernel_size=1, bias=False),
            nn.BatchNorm1d(emb_dims),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.conv7 = nn.Sequential(
            nn.Conv1d(16, 64, kernel_size=1, bias=False), nn.BatchNorm1d(64), nn.LeakyReLU(negative_slope=0.2)
        )
        self.conv8 = nn.Sequential(
            nn.Conv1d(1280, 256, kernel_size=1, bias=False),
            nn.BatchNorm1d(256),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.dp1 = nn.Dropout(p=0.5)
        self.conv9 = nn.Sequential(
            nn.Conv1d(256, 256, kernel_size=1, bias=False),
            nn.BatchNorm1d(256),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.dp2 = nn.Dropout(p=0.5)
        self.conv10 = nn.Sequential(
            nn.Conv1d(256, 128, kernel_size=1, bias=False),
            nn.BatchNorm1d(128),
            nn.LeakyReLU(negative_slope=0.2),
        )
        self.conv11 = nn.Conv1d(128, seg_num_all, kernel_size=1, bias=False)

    def forward(self, x, cat_one_hot):
        batch_size = x.size(0)
        num_points = x.size(2)
        x0 = get_graph_feature(x, k=self.k)
        t = self.transform_net(x0)
        x = x.transpose(2, 1)
        x = torch.bmm(x, t)
        x = x.transpose(2, 1)
        x = get_graph_feature(x, k=self.k)
        x = self.conv1(x)
        x = self.conv2(x)
        x1 = x.max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x1, k=self.k)
        x = self.conv3(x)
        x = self.conv4(x)
        x2 = x.max(dim=-1, keepdim=False)[0]
        x = get_graph_feature(x2, k=self.k)
        x = self.conv5(x)
        x3 = x.max(dim=-1, keepdim=False)[0]
        x = torch.cat((x1, x2, x3), dim=1)
        x = self.conv6(x)
        x = x.max(dim=-1, keepdim=True)[0]
        cat_feat = self.conv7(cat_one_hot.view(batch_size, -1, 1))
        x = torch.cat((x, cat_feat), dim=1)
        x = x.repeat(1, 1, num_points)
        x = torch.cat((x, x1, x2, x3), dim=1)
        x = self.conv8(x)
        x = self.dp1(x)
        x = self.conv9(x)
        x = self.dp2(x)
        x = self.conv10(x)
        return self.conv11(x)


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


def pointcloud_batch(b, n):
    pts = torch.rand(b, n, 3, device=device) * 2 - 1
    scale = torch.empty(b, 1, 3, device=device).uniform_(2.0 / 3.0, 3.0 / 2.0)
    shift = torch.empty(b, 1, 3, device=device).uniform_(-0.2, 0.2)
    return (pts * scale + shift).permute(0, 2, 1)


model = DGCNNCls(k=K).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3 * 100, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, 250, eta_min=1e-3)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    data = pointcloud_batch(B, NPTS)
    label = torch.randint(0, NCLS, (B,), device=device)
    opt.zero_grad()
    logits = model(data)
    loss = cal_loss(logits, label)
    loss.backward()
    opt.step()
    preds = logits.max(dim=1)[1]
    print(f"step {step} loss {loss.item():.4f} correct {(preds == label).sum().item()}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
scheduler.step()
del data, label, logits, loss, preds
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
test_true, test_pred = [], []
with torch.inference_mode():
    for _ in range(EVAL_N):
        data = pointcloud_batch(EVAL_B, NPTS)
        label = torch.randint(0, NCLS, (EVAL_B,), device=device)
        logits = model(data)
        test_true.append(label.cpu())
        test_pred.append(logits.max(dim=1)[1].cpu())
acc = (torch.cat(test_true) == torch.cat(test_pred)).float().mean().item()
print(f"test acc {acc:.3f}")
del data, label, logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

seg = DGCNNPartSeg(NPART, k=SEG_K).to(device)
seg_opt = torch.optim.AdamW(seg.parameters(), lr=1e-3, weight_decay=1e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
seg.train()
for step in range(SEG_STEPS):
    data = pointcloud_batch(SEG_B, SEG_NPTS)
    cat = torch.randint(0, NCAT, (SEG_B,), device=device)
    label_one_hot = F.one_hot(cat, NCAT).float()
    seg_label = torch.randint(0, NPART, (SEG_B, SEG_NPTS), device=device)
    seg_opt.zero_grad()
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.float16, enabled=device == "cuda"):
        seg_pred = seg(data, label_one_hot)
        seg_pred = seg_pred.permute(0, 2, 1).contiguous()
    loss = cal_loss(seg_pred.view(-1, NPART).float(), seg_label.view(-1, 1).squeeze())
    scaler.scale(loss).backward()
    scaler.step(seg_opt)
    scaler.update()
    print(f"seg step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"seg peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
