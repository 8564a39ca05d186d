"""BYOL (Grill et al. 2020) self-supervised pre-training of timm 1.0.29's `convmixer_768_32` (ConvMixer:
7 x 7 patch stem, 32 depthwise/pointwise blocks at 768 channels over a 32 x 32 grid), as a lab's BYOL
reference would write it. The online network is the trunk (`num_classes=0`, global pool, 768 features)
plus a 4096-wide BN projector to 256 and a predictor of the same shape; the target network is a deep copy
of trunk + projector without gradients, updated after every step by `torch._foreach_lerp_` towards the
online weights (tau 0.99) with its BatchNorm buffers copied. Two views of each uint8 image batch are made
on the GPU, per sample, by `torchvision.transforms.v2` (RandomResizedCrop 224 scale 0.08-1, flip, colour
jitter p 0.8, grayscale p 0.2, Gaussian blur p 0.5, solarize p 0.2, ToDtype, Normalize). The online trunk
runs channels-last with `set_grad_checkpointing(True)` (timm's `checkpoint_seq`), bf16 autocast, timm's
`nlars` (LARS with Nesterov, trust ratio, no decay on biases and norms) with a warmup cosine
`CosineLRScheduler`. Batch 48 images (96 views a forward).

Phases: 0 networks and optimizer built; 1 first BYOL step; 2 three more steps; 3 kNN monitor (bank of
512 images, 128 queries, cosine top-20 weighted vote) under inference_mode; 4 linear probe on frozen
features (3 steps of SGD on a 100-class `nn.Linear`, features under no_grad)."""

import copy

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn
from torchvision.transforms import v2

torch.manual_seed(3001)
dev = "cuda"
B, STEPS, TAU = 48, 4, 0.99
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def mlp(dim_in, hidden=4096, dim_out=256):
    return nn.Sequential(
        nn.Linear(dim_in, hidden), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True), nn.Linear(hidden, dim_out)
    )


trunk = timm.create_model("convmixer_768_32", pretrained=False, num_classes=0)
online = nn.Sequential(trunk, mlp(trunk.num_features)).to(dev, memory_format=torch.channels_last)
predictor = mlp(256).to(dev)
target = copy.deepcopy(online)
for p in target.parameters():
    p.requires_grad_(False)
trunk.set_grad_checkpointing(True)
learner = nn.ModuleDict({"online": online, "predictor": predictor})
optimizer = create_optimizer_v2(learner, "nlars", lr=0.2 * B / 256, weight_decay=1.5e-6, momentum=0.9)
scheduler = CosineLRScheduler(optimizer, t_initial=STEPS, warmup_t=1, warmup_lr_init=1e-3)
online_params = [p for p in online.parameters()]
target_params = [p for p in target.parameters()]
report("byol_convmixer_768_32_build_nlars")

augment = v2.Compose(
    [
        v2.RandomResizedCrop(224, scale=(0.08, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8),
        v2.RandomGrayscale(p=0.2),
        v2.RandomApply([v2.GaussianBlur(23, sigma=(0.1, 2.0))], p=0.5),
        v2.RandomSolarize(128, p=0.2),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)
plain = v2.Compose(
    [
        v2.Resize(256, antialias=True),
        v2.CenterCrop(224),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)


def images(n):
    return torch.randint(0, 256, (n, 3, 256, 256), dtype=torch.uint8, device=dev)


def byol_loss(p, z):
    return 2 - 2 * F.cosine_similarity(p, z.detach(), dim=-1)


online.train()
predictor.train()
target.train()
for step in range(STEPS):
    raw = images(B)
    v1 = torch.stack([augment(img) for img in raw]).contiguous(memory_format=torch.channels_last)
    v2_ = torch.stack([augment(img) for img in raw]).contiguous(memory_format=torch.channels_last)
    views = torch.cat([v1, v2_])
    with torch.autocast("cuda", dtype=torch.bfloat16):
        p1, p2 = predictor(online(views)).float().chunk(2)
        with torch.no_grad():
            z1, z2 = target(views).float().chunk(2)
        loss = (byol_loss(p1, z2) + byol_loss(p2, z1)).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    scheduler.step(step + 1)
    with torch.no_grad():
        torch._foreach_lerp_(target_params, online_params, 1.0 - TAU)
        for t_buf, o_buf in zip(target.buffers(), online.buffers()):
            t_buf.copy_(o_buf)
    if step == 0:
        print("first step loss", round(loss.item(), 4))
        report("byol_first_step_bf16_checkpointed")
print("byol loss", round(loss.item(), 4))
report("byol_three_more_steps")

del raw, v1, v2_, views, p1, p2, z1, z2, loss
trunk.eval()
bank_labels = torch.randint(0, 100, (512,), device=dev)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    bank = torch.cat(
        [
            F.normalize(
                trunk(plain(images(128)).contiguous(memory_format=torch.channels_last)).float(), dim=1
            )
            for _ in range(4)
        ]
    )
    queries = F.normalize(
        trunk(plain(images(128)).contiguous(memory_format=torch.channels_last)).float(), dim=1
    )
    sim, idx = (queries @ bank.t()).topk(20, dim=1)
    weights = (sim / 0.07).exp()
    votes = torch.zeros(128, 100, device=dev).scatter_add_(1, bank_labels[idx], weights)
    knn_pred = votes.argmax(1)
print("knn class 0 hits", int((knn_pred == 0).sum()))
report("knn_monitor_inference_mode")

probe = nn.Linear(trunk.num_features, 100).to(dev)
probe_opt = torch.optim.SGD(probe.parameters(), lr=0.1, momentum=0.9)
for _ in range(3):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        feats = trunk(plain(images(96)).contiguous(memory_format=torch.channels_last)).float()
    logits = probe(feats)
    loss = F.cross_entropy(logits, torch.randint(0, 100, (96,), device=dev))
    probe_opt.zero_grad(set_to_none=True)
    loss.backward()
    probe_opt.step()
print("probe loss", round(loss.item(), 4))
report("linear_probe_frozen_trunk")
