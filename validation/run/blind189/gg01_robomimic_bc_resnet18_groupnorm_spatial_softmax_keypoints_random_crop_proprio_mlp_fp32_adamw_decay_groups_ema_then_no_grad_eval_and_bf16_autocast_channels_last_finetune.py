"""Behaviour cloning in the style of robomimic's BC with an image observation encoder: a torchvision
ResNet-18 (random init) whose BatchNorm layers are GroupNorm(C // 16, C) (passed as norm_layer, as the
Diffusion Policy / robomimic code replaces them), cut after layer4 (avgpool and fc removed), a 1x1 conv to
32 channels and a spatial-softmax keypoint layer (learnable temperature; expected x and y over a
[-1, 1] grid: 64 numbers per camera). Two cameras (agentview and wrist, 128 x 128 uint8 frames made on the
host, pinned, sent non_blocking, randomly cropped to 116 x 116 on the device with one offset per batch and
scaled to [0, 1]) share one encoder; the keypoints are concatenated with the 9-dim proprioception
(end-effector position, quaternion, gripper) and passed through an MLP (1024, 1024, ReLU) to a 7-dim
action (tanh), loss MSE. fp32, batch 256, AdamW (lr 1e-4) with two parameter groups: weight decay 1e-4
for conv / linear weights, none for norms, biases and the temperature; an EMA copy of the policy through
torch.optim.swa_utils.AveragedModel(get_ema_multi_avg_fn(0.995)).

Phases: the first step; 4 more steps; evaluation of the EMA policy under no_grad on 4 batches of 512
(centre crop), the MSE against the demo actions; then 3 fine-tuning steps under bf16 autocast with the
policy and the inputs in channels_last memory format. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18901)
if SMALL:
    B, STEPS, EVAL_B, EVAL_N, FT_STEPS, RES, CROP = 4, 1, 4, 1, 1, 64, 56
else:
    B, STEPS, EVAL_B, EVAL_N, FT_STEPS, RES, CROP = 256, 4, 512, 4, 3, 128, 116
PROPRIO, ACT, KP = 9, 7, 32
device = "cuda" if torch.cuda.is_available() else "cpu"


class SpatialSoftmax(nn.Module):
    def __init__(self, in_ch, num_kp):
        super().__init__()
        self.kp = nn.Conv2d(in_ch, num_kp, 1)
        self.temperature = nn.Parameter(torch.ones(1))

    def forward(self, feat):
        feat = self.kp(feat)
        b, k, h, w = feat.shape
        ys = torch.linspace(-1, 1, h, device=feat.device)
        xs = torch.linspace(-1, 1, w, device=feat.device)
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        attn = F.softmax(feat.reshape(b, k, h * w) / self.temperature, dim=-1)
        ex = (attn * gx.reshape(1, 1, -1)).sum(-1)
        ey = (attn * gy.reshape(1, 1, -1)).sum(-1)
        return torch.cat([ex, ey], dim=-1)


def resnet18_gn():
    net = torchvision.models.resnet18(weights=None, norm_layer=lambda c: nn.GroupNorm(c // 16, c))
    return nn.Sequential(*list(net.children())[:-2])


class BCPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = resnet18_gn()
        self.pool = SpatialSoftmax(512, KP)
        self.mlp = nn.Sequential(
            nn.Linear(2 * 2 * KP + PROPRIO, 1024),
            nn.ReLU(),
            nn.Linear(1024, 1024),
            nn.ReLU(),
            nn.Linear(1024, ACT),
        )

    def forward(self, agentview, wrist, proprio):
        b = agentview.shape[0]
        feats = self.pool(self.encoder(torch.cat([agentview, wrist], dim=0)))
        feats = torch.cat([feats[:b], feats[b:], proprio], dim=-1)
        return torch.tanh(self.mlp(feats))


def param_groups(model, wd):
    decay, no_decay = [], []
    for _name, p in model.named_parameters():
        if p.ndim >= 2:
            decay.append(p)
        else:
            no_decay.append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def make_batch(bsz):
    imgs = torch.randint(0, 256, (2, bsz, 3, RES, RES), dtype=torch.uint8)
    proprio = torch.randn(bsz, PROPRIO)
    actions = torch.rand(bsz, ACT) * 2 - 1
    if device == "cuda":
        imgs, proprio, actions = imgs.pin_memory(), proprio.pin_memory(), actions.pin_memory()
    return (
        imgs.to(device, non_blocking=True),
        proprio.to(device, non_blocking=True),
        actions.to(device, non_blocking=True),
    )


def crop(imgs, train, memory_format=torch.contiguous_format):
    if train:
        oy, ox = torch.randint(0, RES - CROP + 1, (2,)).tolist()
    else:
        oy = ox = (RES - CROP) // 2
    out = imgs[..., oy : oy + CROP, ox : ox + CROP].float().div_(255.0)
    return [v.contiguous(memory_format=memory_format) for v in out.unbind(0)]


policy = BCPolicy().to(device)
ema = AveragedModel(policy, multi_avg_fn=get_ema_multi_avg_fn(0.995))
opt = torch.optim.AdamW(param_groups(policy, 1e-4), lr=1e-4)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.2f}M")
if device == "cuda":
    print(f"policy+ema {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(amp=False, memory_format=torch.contiguous_format):
    imgs, proprio, actions = make_batch(B)
    agent, wrist = crop(imgs, True, memory_format)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        pred = policy(agent, wrist, proprio)
    loss = F.mse_loss(pred.float(), actions)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    ema.update_parameters(policy)
    return loss.item()


policy.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _step in range(1, STEPS + 1):
    loss = train_step()
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

ema.eval()
total = 0.0
with torch.no_grad():
    for _ in range(EVAL_N):
        imgs, proprio, actions = make_batch(EVAL_B)
        agent, wrist = crop(imgs, False)
        total += F.mse_loss(ema(agent, wrist, proprio), actions).item()
print(f"eval mse {total / EVAL_N:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

policy = policy.to(memory_format=torch.channels_last)
for step in range(FT_STEPS):
    loss = train_step(amp=device == "cuda", memory_format=torch.channels_last)
    print(f"bf16 finetune step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"finetune allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
