"""Hand-written MLP-Mixer B/16 (patch conv, 12 mixer blocks of token-mixing and channel-mixing MLPs with
LayerNorm, GELU and stochastic depth, global average pool head) trained with each block wrapped in
`torch.utils.checkpoint.checkpoint(use_reentrant=False)`: fp32 weights, bf16 autocast, mixup-style soft
targets (cross entropy on class probabilities), RAdam with decoupled weight decay, clip_grad_norm_, batch
256 at 224 px, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DIM, DEPTH, TOK_MLP, CH_MLP, PATCH, IMG, CLASSES, B = (
    (32, 2, 16, 64, 8, 32, 10, 4) if os.environ.get("SMOKE") else (768, 12, 384, 3072, 16, 224, 1000, 256)
)
TOKENS = (IMG // PATCH) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(507)


class DropPath(nn.Module):
    def __init__(self, p):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1, 1, device=x.device, dtype=x.dtype) >= self.p
        return x * keep / (1.0 - self.p)


class MlpBlock(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self, drop_path):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM, eps=1e-6)
        self.token_mix = MlpBlock(TOKENS, TOK_MLP)
        self.norm2 = nn.LayerNorm(DIM, eps=1e-6)
        self.channel_mix = MlpBlock(DIM, CH_MLP)
        self.drop_path = DropPath(drop_path)

    def forward(self, x):
        x = x + self.drop_path(self.token_mix(self.norm1(x).transpose(1, 2)).transpose(1, 2))
        return x + self.drop_path(self.channel_mix(self.norm2(x)))


class MlpMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, DIM, kernel_size=PATCH, stride=PATCH)
        rates = torch.linspace(0, 0.1, DEPTH).tolist()
        self.blocks = nn.ModuleList(MixerBlock(r) for r in rates)
        self.norm = nn.LayerNorm(DIM, eps=1e-6)
        self.head = nn.Linear(DIM, CLASSES)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(self.norm(x).mean(dim=1))


model = MlpMixer().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.RAdam(model.parameters(), lr=1e-3, weight_decay=0.05, decoupled_weight_decay=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    labels = torch.randint(0, CLASSES, (B,), device=device)
    lam = 0.7
    perm = torch.randperm(B, device=device)
    images = lam * images + (1 - lam) * images[perm]
    one_hot = F.one_hot(labels, CLASSES).float()
    soft = lam * one_hot + (1 - lam) * one_hot[perm]
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(images)
    loss = F.cross_entropy(logits.float(), soft)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
