"""PointNet after Qi et al. 2017 ("PointNet: Deep Learning on Point Sets for 3D Classification and
Segmentation"), written by hand as in the fxia22/pointnet.pytorch repository: an input T-Net (Conv1d 3 ->
64 -> 128 -> 1,024 with BatchNorm1d + ReLU, max over points, Linear 1,024 -> 512 -> 256 -> 9 plus the
identity) predicting a 3 x 3 transform applied by bmm, a shared MLP (Conv1d 3 -> 64), a feature T-Net
predicting a 64 x 64 transform, then Conv1d 64 -> 128 -> 1,024 and a global max pool to a 1,024-d
descriptor. Classification on ModelNet40-shaped clouds (1,024 points, 40 classes): the head 1,024 -> 512
-> 256 -> 40 with dropout 0.3, log_softmax and nll_loss plus the feature transform's orthogonality
regularizer ||I - A A^T||_F weighted 0.001. fp32 with Adam (lr 1e-3, betas (0.9, 0.999), weight decay
1e-4) and StepLR(20, 0.5), batch 256, the points jittered and randomly rotated about the up axis on the
device; the first step its own phase, then 4 steps. Evaluation under no_grad of 4 batches of 512 with a
forward hook on the global max pool recording the critical-point indices (the argmax over points, as the
paper's visualisation does). Then the part-segmentation network (ShapeNet-part shapes of 2,048 points, 16
object categories one-hot, 50 part labels): the 64-d point features concatenated with the repeated
global feature (and the category one-hot), Conv1d 1,088+16 -> 512 -> 256 -> 128 -> 50, trained under
bf16 autocast with AdamW (lr 1e-3, foreach) at batch 64 for 3 steps with the regularizer. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18301)
if SMALL:
    B, NPTS, STEPS, EVAL_B, EVAL_N, SEG_B, SEG_NPTS, SEG_STEPS = 4, 64, 2, 4, 1, 2, 128, 2
else:
    B, NPTS, STEPS, EVAL_B, EVAL_N, SEG_B, SEG_NPTS, SEG_STEPS = 256, 1024, 5, 512, 4, 64, 2048, 3
NCLS, NCAT, NPART = 40, 16, 50
device = "cuda" if torch.cuda.is_available() else "cpu"


class STNkd(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k
        self.conv1 = nn.Conv1d(k, 64, 1)
        self.conv2 = nn.Conv1d(64, 128, 1)
        self.conv3 = nn.Conv1d(128, 1024, 1)
        self.fc1 = nn.Linear(1024, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, k * k)
        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(128)
        self.bn3 = nn.BatchNorm1d(1024)
        self.bn4 = nn.BatchNorm1d(512)
        self.bn5 = nn.BatchNorm1d(256)

    def forward(self, x):
        b = x.size(0)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0].view(-1, 1024)
        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)
        iden = torch.eye(self.k, device=x.device, dtype=x.dtype).flatten().unsqueeze(0).repeat(b, 1)
        return (x + iden).view(-1, self.k, self.k)


class GlobalMaxPool(nn.Module):
    def forward(self, x):
        return torch.max(x, 2, keepdim=True)


class PointNetfeat(nn.Module):
    def __init__(self, global_feat=True):
        super().__init__()
        self.stn = STNkd(3)
        self.conv1 = nn.Conv1d(3, 64, 1)
        self.conv2 = nn.Conv1d(64, 128, 1)
        self.conv3 = nn.Conv1d(128, 1024, 1)
        self.bn1 = nn.BatchNorm1d(64)
        self.bn2 = nn.BatchNorm1d(128)
        self.bn3 = nn.BatchNorm1d(1024)
        self.fstn = STNkd(64)
        self.pool = GlobalMaxPool()
        self.global_feat = global_feat

    def forward(self, x):
        n_pts = x.size(2)
        trans = self.stn(x)
        x = torch.bmm(x.transpose(2, 1), trans).transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        trans_feat = self.fstn(x)
        x = torch.bmm(x.transpose(2, 1), trans_feat).transpose(2, 1)
        pointfeat = x
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = self.pool(x)[0].view(-1, 1024)
        if self.global_feat:
            return x, trans, trans_feat
        x = x.view(-1, 1024, 1).repeat(1, 1, n_pts)
        return torch.cat([x, pointfeat], 1), trans, trans_feat


class PointNetCls(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.feat = PointNetfeat(global_feat=True)
        self.fc1 = nn.Linear(1024, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, k)
        self.dropout = nn.Dropout(p=0.3)
        self.bn1 = nn.BatchNorm1d(512)
        self.bn2 = nn.BatchNorm1d(256)

    def forward(self, x):
        x, trans, trans_feat = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.dropout(self.fc2(x))))
        return F.log_softmax(self.fc3(x), dim=1), trans, trans_feat


class PointNetPartSeg(nn.Module):
    def __init__(self, n_cat, n_part):
        super().__init__()
        self.feat = PointNetfeat(global_feat=False)
        self.conv1 = nn.Conv1d(1088 + n_cat, 512, 1)
        self.conv2 = nn.Conv1d(512, 256, 1)
        self.conv3 = nn.Conv1d(256, 128, 1)
        self.conv4 = nn.Conv1d(128, n_part, 1)
        self.bn1 = nn.BatchNorm1d(512)
        self.bn2 = nn.BatchNorm1d(256)
        self.bn3 = nn.BatchNorm1d(128)

    def forward(self, x, cat_onehot):
        n_pts = x.size(2)
        x, trans, trans_feat = self.feat(x)
        x = torch.cat([x, cat_onehot.unsqueeze(2).expand(-1, -1, n_pts)], 1)
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = self.conv4(x).transpose(2, 1).contiguous()
        return x, trans, trans_feat


def feature_transform_regularizer(trans):
    d = trans.size(1)
    eye = torch.eye(d, device=trans.device)[None, :, :]
    return torch.mean(torch.norm(torch.bmm(trans, trans.transpose(2, 1)) - eye, dim=(1, 2)))


def augment(points):
    # points: (B, N, 3); random rotation about the up (y) axis and Gaussian jitter, as the data loader does
    theta = torch.rand(points.size(0), device=points.device) * 2 * torch.pi
    c, s = torch.cos(theta), torch.sin(theta)
    zero, one = torch.zeros_like(c), torch.ones_like(c)
    rot = torch.stack([c, zero, s, zero, one, zero, -s, zero, c], 1).view(-1, 3, 3)
    points = torch.bmm(points, rot)
    return points + 0.02 * torch.randn_like(points)


def cloud_batch(b, n):
    pts = torch.randn(b, n, 3, device=device)
    pts = pts / pts.norm(dim=2, keepdim=True).amax(dim=1, keepdim=True)
    return pts


classifier = PointNetCls(NCLS).to(device)
optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
print(f"params {sum(p.numel() for p in classifier.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

classifier.train()
for step in range(STEPS):
    points = augment(cloud_batch(B, NPTS)).transpose(2, 1)
    target = torch.randint(0, NCLS, (B,), device=device)
    optimizer.zero_grad()
    pred, trans, trans_feat = classifier(points)
    loss = F.nll_loss(pred, target) + feature_transform_regularizer(trans_feat) * 0.001
    loss.backward()
    optimizer.step()
    correct = pred.argmax(1).eq(target).sum()
    print(f"step {step} loss {loss.item():.4f} acc {correct.item() / B:.3f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
scheduler.step()
del points, target, pred, trans, trans_feat, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

critical = []


def record_critical(module, inputs, output):
    critical.append(output[1].squeeze(2).cpu())


handle = classifier.feat.pool.register_forward_hook(record_critical)
classifier.eval()
total_correct = 0
with torch.no_grad():
    for _ in range(EVAL_N):
        points = cloud_batch(EVAL_B, NPTS).transpose(2, 1)
        target = torch.randint(0, NCLS, (EVAL_B,), device=device)
        pred, _, _ = classifier(points)
        total_correct += pred.argmax(1).eq(target).sum().item()
handle.remove()
n_unique = sum(torch.unique(c[0]).numel() for c in critical)
print(f"eval acc {total_correct / (EVAL_N * EVAL_B):.3f} critical points (first clouds) {n_unique}")
del points, target, pred
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

seg = PointNetPartSeg(NCAT, NPART).to(device)
seg_opt = torch.optim.AdamW(seg.parameters(), lr=1e-3, weight_decay=1e-2, foreach=True)
seg.train()
for step in range(SEG_STEPS):
    points = augment(cloud_batch(SEG_B, SEG_NPTS)).transpose(2, 1)
    cat = torch.randint(0, NCAT, (SEG_B,), device=device)
    cat_onehot = F.one_hot(cat, NCAT).float()
    labels = torch.randint(0, NPART, (SEG_B, SEG_NPTS), device=device)
    seg_opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        logits, trans, trans_feat = seg(points, cat_onehot)
        loss = F.cross_entropy(logits.view(-1, NPART), labels.view(-1))
    loss = loss + feature_transform_regularizer(trans_feat.float()) * 0.001
    loss.backward()
    seg_opt.step()
    print(f"seg step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"seg peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
