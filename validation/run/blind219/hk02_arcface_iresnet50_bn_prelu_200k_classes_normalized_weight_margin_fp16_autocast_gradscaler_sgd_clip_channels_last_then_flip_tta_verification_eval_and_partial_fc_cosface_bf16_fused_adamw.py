"""Face recognition: an InsightFace-style IResNet-50 (BN-conv-BN-PReLU-conv-BN basic blocks, stem conv + BN +
PReLU, an output BN2d / dropout / Linear(512 * 7 * 7, 512) / BN1d embedding) on 112 x 112 random faces with
an ArcFace (additive angular margin, s = 64, m = 0.5) head over 200,000 identities: the embedding and the
class-centre matrix are L2-normalised, the target cosine gets cos(theta + m) by acos / cos and is scattered
back into the logits.

Phases: 3 steps at batch 256 in channels_last under fp16 autocast with torch.amp.GradScaler (unscale_, then
clip_grad_norm_ at 5) and SGD momentum 0.9, weight decay 5e-4; verification evaluation under inference_mode:
2,048 images embedded at batch 512 with flip test-time augmentation (the embedding of the image plus that of
its horizontal flip), the 2,048 x 2,048 cosine matrix and the accuracy at 100 thresholds by broadcasting;
Partial FC (An et al. 2022) with CosFace (m = 0.35): 20 % of the class centres sampled per step (random
scores with the batch's positives forced to the top, topk, sorted, the labels remapped by
torch.searchsorted), the sampled centres gathered by indexing the full matrix, bf16 autocast and fused
AdamW, 3 steps; then empty_cache() and a pure fp16 copy of the backbone embedding 4,096 images at batch
1,024 under inference_mode. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2192)
device = "cuda" if torch.cuda.is_available() else "cpu"
LAYERS = [1, 1, 1, 1] if SMALL else [3, 4, 14, 3]
CLASSES = 1000 if SMALL else 200_000
BATCH, EVAL_N, EVAL_BATCH, BIG_N, BIG_BATCH = (8, 32, 16, 32, 16) if SMALL else (256, 2048, 512, 4096, 1024)
EMB = 512


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class IBasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(cin, eps=1e-5)
        self.conv1 = nn.Conv2d(cin, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout, eps=1e-5)
        self.prelu = nn.PReLU(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout, eps=1e-5)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout, eps=1e-5)
            )

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.bn1(x)
        out = self.conv1(out)
        out = self.bn2(out)
        out = self.prelu(out)
        out = self.conv2(out)
        out = self.bn3(out)
        return out + identity


class IResNet(nn.Module):
    def __init__(self, layers, emb=EMB):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64, eps=1e-5)
        self.prelu = nn.PReLU(64)
        blocks, cin = [], 64
        for n, cout in zip(layers, [64, 128, 256, 512]):
            for i in range(n):
                blocks.append(IBasicBlock(cin, cout, 2 if i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.bn2 = nn.BatchNorm2d(512, eps=1e-5)
        self.dropout = nn.Dropout(0.0)
        self.fc = nn.Linear(512 * 7 * 7, emb)
        self.features = nn.BatchNorm1d(emb, eps=1e-5)

    def forward(self, x):
        x = self.prelu(self.bn1(self.conv1(x)))
        x = self.blocks(x)
        x = self.bn2(x)
        x = torch.flatten(x, 1)
        x = self.dropout(x)
        x = self.fc(x)
        return self.features(x)


class ArcFace(nn.Module):
    def __init__(self, classes, emb=EMB, s=64.0, m=0.5):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(classes, emb).normal_(0, 0.01))
        self.s, self.m = s, m

    def forward(self, emb, labels):
        logits = F.linear(F.normalize(emb), F.normalize(self.weight)).clamp(-1, 1)
        target = logits.gather(1, labels[:, None])
        theta = torch.acos(target.float().clamp(-1 + 1e-7, 1 - 1e-7))
        final = torch.cos(theta + self.m).to(logits.dtype)
        logits = logits.scatter(1, labels[:, None], final)
        return F.cross_entropy(logits * self.s, labels)


model = IResNet(LAYERS).to(device).to(memory_format=torch.channels_last)
head = ArcFace(CLASSES).to(device)
params = list(model.parameters()) + list(head.parameters())
opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=5e-4)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
fp16 = dict(device_type="cuda", dtype=torch.float16, enabled=device == "cuda")


def faces(n):
    return torch.randn(n, 3, 112, 112, device=device).to(memory_format=torch.channels_last)


# 1. ArcFace, fp16 autocast + GradScaler, SGD
model.train()
for step in range(3):
    x, y = faces(BATCH), torch.randint(0, CLASSES, (BATCH,), device=device)
    with torch.autocast(**fp16):
        loss = head(model(x), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(params, 5.0)
    scaler.step(opt)
    scaler.update()
print(f"arcface loss {loss.item():.4f} scale {scaler.get_scale()}")
report("arcface fp16 sgd")

# 2. verification: flip TTA embeddings, cosine matrix, accuracy over thresholds
model.eval()
with torch.inference_mode():
    embs = []
    for i in range(EVAL_N // EVAL_BATCH):
        x = faces(EVAL_BATCH)
        with torch.autocast(**fp16):
            e = model(x) + model(torch.flip(x, dims=[3]))
        embs.append(F.normalize(e.float()))
    embs = torch.cat(embs)
    ids = torch.randint(0, EVAL_N // 4, (EVAL_N,), device=device)
    same = ids[:, None] == ids[None, :]
    sim = embs @ embs.T
    thresholds = torch.linspace(-1, 1, 100, device=device)
    pred = sim[None] > thresholds[:, None, None]
    acc = (pred == same[None]).float().mean(dim=(1, 2))
    best = acc.max().item()
del pred, sim, same
print(f"verification best acc {best:.4f}")
report("verification eval")

# 3. Partial FC + CosFace, bf16 autocast, fused AdamW
del opt, scaler
n_sample = int(CLASSES * 0.2)
opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05, fused=device == "cuda")
bf16 = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")
model.train()
for step in range(3):
    x, y = faces(BATCH), torch.randint(0, CLASSES, (BATCH,), device=device)
    with torch.no_grad():
        perm = torch.rand(CLASSES, device=device)
        perm[y] = 2.0
        index = torch.topk(perm, k=n_sample)[1].sort()[0]
        local_y = torch.searchsorted(index, y)
    with torch.autocast(**bf16):
        emb = model(x)
        w = head.weight[index]
        logits = F.linear(F.normalize(emb), F.normalize(w)).clamp(-1, 1)
        logits = logits - 0.35 * F.one_hot(local_y, n_sample).to(logits.dtype)
        loss = F.cross_entropy(logits * 64.0, local_y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"partial fc loss {loss.item():.4f}")
report("partial fc cosface bf16 fused adamw")

# 4. pure fp16 backbone, large-batch embedding
del opt, head, params
for p in model.parameters():
    p.grad = None
if device == "cuda":
    torch.cuda.empty_cache()
model16 = model.half().eval()
with torch.inference_mode():
    out = []
    for i in range(BIG_N // BIG_BATCH):
        out.append(F.normalize(model16(faces(BIG_BATCH).half()).float()).cpu())
    gallery = torch.cat(out)
print(f"gallery {tuple(gallery.shape)}")
report("fp16 gallery embedding")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
