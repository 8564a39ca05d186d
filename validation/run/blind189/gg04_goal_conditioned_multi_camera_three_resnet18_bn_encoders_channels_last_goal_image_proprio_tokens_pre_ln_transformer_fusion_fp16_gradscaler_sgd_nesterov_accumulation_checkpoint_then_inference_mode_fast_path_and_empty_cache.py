"""A goal-conditioned visuomotor policy with multi-camera inputs, the kind written for tabletop
manipulation (in the spirit of Octo / GCBC baselines, by hand): three cameras (front, left wrist, right
wrist; 128 x 128, uint8 on the device, scaled and normalised there) each through its own torchvision
ResNet-18 (random init, BatchNorm, avgpool and fc removed, channels_last), the goal image through the
front camera's encoder; each 4 x 4 feature map becomes 16 tokens (Linear 512 -> 384) with a learned
per-camera position embedding; plus a proprioception token (14-dim joints through a 2-layer MLP) and a
learned readout token: 66 tokens through an nn.TransformerEncoder (6 pre-LN layers, 384 wide, 6 heads,
feed-forward 1536, GELU, batch_first). The readout goes to an MLP predicting a chunk of 10 actions of 7
dims (MSE on 6 arm dims + BCE-with-logits on the gripper).

Training under fp16 autocast with torch.amp.GradScaler, SGD (lr 0.01, momentum 0.9, nesterov, weight
decay 1e-4 on weights only), 2 micro-batches of 96 accumulated per optimizer step (loss / 2), each camera
encoder wrapped in torch.utils.checkpoint (use_reentrant=False), gradients clipped at 1.0 after
unscale_. Phases: the first optimizer step; 3 more; evaluation in fp32 under torch.inference_mode on 2
batches of 256 with the model in eval mode (nn.TransformerEncoder's native fast path), the predicted
chunks moved to the host; then torch.cuda.empty_cache() and one evaluation batch of 512 under fp16
autocast. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18904)
if SMALL:
    MB, ACCUM, STEPS, EVAL_B, EVAL_N, BIG_B, RES = 2, 2, 1, 4, 1, 4, 64
else:
    MB, ACCUM, STEPS, EVAL_B, EVAL_N, BIG_B, RES = 96, 2, 3, 256, 2, 512, 128
D, HEADS, LAYERS, FF = 384, 6, 6, 1536
PROPRIO, ACT, CHUNK, CAMS = 14, 7, 10, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def resnet_trunk():
    net = torchvision.models.resnet18(weights=None)
    return nn.Sequential(*list(net.children())[:-2])


class GoalConditionedPolicy(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoders = nn.ModuleList([resnet_trunk() for _ in range(CAMS)])
        self.tok_proj = nn.Linear(512, D)
        self.n_patch = (RES // 32) ** 2
        self.cam_pos = nn.Parameter(torch.randn(CAMS + 1, self.n_patch, D) * 0.02)
        self.proprio_mlp = nn.Sequential(nn.Linear(PROPRIO, D), nn.GELU(), nn.Linear(D, D))
        self.readout = nn.Parameter(torch.zeros(1, 1, D))
        layer = nn.TransformerEncoderLayer(
            D, HEADS, FF, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.transformer = nn.TransformerEncoder(
            layer, LAYERS, norm=nn.LayerNorm(D), enable_nested_tensor=False
        )
        self.head = nn.Sequential(nn.Linear(D, 512), nn.GELU(), nn.Linear(512, CHUNK * ACT))
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255)
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255)
        self.use_checkpoint = False

    def encode(self, idx, img):
        x = ((img.float() - self.mean) / self.std).contiguous(memory_format=torch.channels_last)
        enc = self.encoders[idx]
        if self.use_checkpoint and self.training:
            feat = checkpoint(enc, x, use_reentrant=False)
        else:
            feat = enc(x)
        return self.tok_proj(feat.flatten(2).transpose(1, 2)) + self.cam_pos[min(idx, CAMS)]

    def forward(self, cams, goal, proprio):
        b = proprio.shape[0]
        tokens = [self.encode(i, cams[:, i]) for i in range(CAMS)]
        tokens.append(self.encode(0, goal) - self.cam_pos[0] + self.cam_pos[CAMS])
        tokens.append(self.proprio_mlp(proprio)[:, None])
        tokens.append(self.readout.expand(b, 1, D))
        h = self.transformer(torch.cat(tokens, dim=1))
        return self.head(h[:, -1]).view(b, CHUNK, ACT)


def make_batch(bsz):
    cams = torch.randint(0, 256, (bsz, CAMS, 3, RES, RES), dtype=torch.uint8, device=device)
    goal = torch.randint(0, 256, (bsz, 3, RES, RES), dtype=torch.uint8, device=device)
    proprio = torch.randn(bsz, PROPRIO, device=device)
    actions = torch.randn(bsz, CHUNK, ACT, device=device)
    actions[..., -1] = (actions[..., -1] > 0).float()
    return cams, goal, proprio, actions


def loss_fn(pred, actions):
    pred = pred.float()
    return F.mse_loss(pred[..., :-1], actions[..., :-1]) + F.binary_cross_entropy_with_logits(
        pred[..., -1], actions[..., -1]
    )


policy = GoalConditionedPolicy().to(device).to(memory_format=torch.channels_last)
policy.use_checkpoint = True
decay = [p for n, p in policy.named_parameters() if p.ndim >= 2 and "pos" not in n]
no_decay = [p for n, p in policy.named_parameters() if not (p.ndim >= 2 and "pos" not in n)]
opt = torch.optim.SGD(
    [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.01,
    momentum=0.9,
    nesterov=True,
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M")
if device == "cuda":
    print(f"policy {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def train_step():
    total = 0.0
    for _ in range(ACCUM):
        cams, goal, proprio, actions = make_batch(MB)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            pred = policy(cams, goal, proprio)
        loss = loss_fn(pred, actions) / ACCUM
        scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return total


policy.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss = train_step()
    print(f"step {step} loss {loss:.4f} scale {scaler.get_scale()}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

policy.eval()
preds = []
with torch.inference_mode():
    for _ in range(EVAL_N):
        cams, goal, proprio, actions = make_batch(EVAL_B)
        preds.append(policy(cams, goal, proprio).cpu())
print(f"eval chunks {torch.cat(preds).shape}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

torch.cuda.empty_cache()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    cams, goal, proprio, actions = make_batch(BIG_B)
    pred = policy(cams, goal, proprio)
    print(f"big batch loss {loss_fn(pred, actions).item():.4f}")
if device == "cuda":
    print(f"big eval allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
    print(f"reserved {torch.cuda.memory_reserved()}")
