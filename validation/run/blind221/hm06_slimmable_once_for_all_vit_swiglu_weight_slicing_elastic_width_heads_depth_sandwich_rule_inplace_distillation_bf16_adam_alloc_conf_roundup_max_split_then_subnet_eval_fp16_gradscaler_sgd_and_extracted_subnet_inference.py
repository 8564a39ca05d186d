"""Weight-sharing supernets: a slimmable / once-for-all ViT whose sub-networks are slices of one weight set.

PYTORCH_CUDA_ALLOC_CONF is set at the top (roundup_power2_divisions [256:1, 512:2, 1024:4, >:8] and
max_split_size_mb:512). The supernet is a ViT-B/16-like encoder by hand (patch conv 16x16, 12 blocks of
768, 12 heads of 64 with SDPA, a SwiGLU gated-linear-unit MLP of 2048) on random 224 x 224 images; a
sub-network keeps the first h heads (slices of the q, k, v weights' rows and the projection's columns), the
first f hidden units of the SwiGLU (rows of gate/up, columns of down) and the first d blocks, all by
slicing the shared weights per forward (views, F.linear on the slices).

Phases: 3 steps of slimmable training by the sandwich rule at batch 64 under bf16 autocast (the largest
network with label cross-entropy, then the smallest and 2 randomly sampled widths each distilled in place
from the largest's detached soft labels by KL divergence, one backward per sub-network accumulating into
the shared gradients) with Adam; evaluation of 4 fixed sub-networks under inference_mode at batch 256;
3 steps of once-for-all elastic depth and width (the largest plus 2 sampled sub-networks with depth in 8,
10, 12) under fp16 autocast with GradScaler (initial scale 2^10) and SGD nesterov; then one sub-network (6 heads, SwiGLU 1024,
8 blocks) extracted into a standalone model by cloning the slices, the supernet and optimizer deleted,
empty_cache(), and inference_mode evaluation of the extracted model in bf16 at batch 512. 4 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "roundup_power2_divisions:[256:1,512:2,1024:4,>:8],max_split_size_mb:512"
)

import random  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2216)
rng = random.Random(2216)
device = "cuda" if torch.cuda.is_available() else "cpu"
IMG, D, HEADS, FF, DEPTH, CLASSES = (64, 192, 3, 512, 4, 100) if SMALL else (224, 768, 12, 2048, 12, 1000)
HD = 64
BATCH, EVAL_BATCH, SUB_BATCH = (2, 4, 8) if SMALL else (64, 256, 512)
WIDTHS = (0.25, 0.5, 0.75, 1.0)
DEPTHS = (2, 3, 4) if SMALL else (8, 10, 12)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class SlimBlock(nn.Module):
    def __init__(self, heads, ff):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.q, self.k, self.v = (nn.Linear(D, heads * HD) for _ in range(3))
        self.proj = nn.Linear(heads * HD, D)
        self.gate, self.up = nn.Linear(D, ff, bias=False), nn.Linear(D, ff, bias=False)
        self.down = nn.Linear(ff, D, bias=False)

    def forward(self, x, heads, ff):
        b, t, _ = x.shape
        h = self.ln1(x)
        e = heads * HD
        q = F.linear(h, self.q.weight[:e], self.q.bias[:e]).view(b, t, heads, HD).transpose(1, 2)
        k = F.linear(h, self.k.weight[:e], self.k.bias[:e]).view(b, t, heads, HD).transpose(1, 2)
        v = F.linear(h, self.v.weight[:e], self.v.bias[:e]).view(b, t, heads, HD).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, e)
        x = x + F.linear(a, self.proj.weight[:, :e], self.proj.bias)
        h = self.ln2(x)
        g = F.silu(F.linear(h, self.gate.weight[:ff])) * F.linear(h, self.up.weight[:ff])
        return x + F.linear(g, self.down.weight[:, :ff])


class SlimViT(nn.Module):
    def __init__(self, heads=HEADS, ff=FF, depth=DEPTH):
        super().__init__()
        self.patch = nn.Conv2d(3, D, 16, stride=16)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, (IMG // 16) ** 2 + 1, D) * 0.02)
        self.blocks = nn.ModuleList(SlimBlock(heads, ff) for _ in range(depth))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)
        self.max_heads, self.max_ff = heads, ff

    def forward(self, x, width=1.0, depth=None):
        heads, ff = max(1, int(self.max_heads * width)), int(self.max_ff * width)
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for blk in self.blocks[: depth or len(self.blocks)]:
            x = blk(x, heads, ff)
        return self.head(self.norm(x[:, 0]))


def images(n):
    return torch.randn(n, 3, IMG, IMG, device=device), torch.randint(0, CLASSES, (n,), device=device)


def kd(student, teacher_probs):
    return F.kl_div(F.log_softmax(student.float(), -1), teacher_probs, reduction="batchmean")


model = SlimViT().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
bf16 = torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda")
for step in range(3):
    x, y = images(BATCH)
    opt.zero_grad(set_to_none=True)
    with bf16:
        logits = model(x, 1.0)
        loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    soft = F.softmax(logits.detach().float(), -1)
    del logits
    for width in [WIDTHS[0]] + rng.sample(WIDTHS[1:3], 2):
        with bf16:
            sub_loss = kd(model(x, width), soft)
        sub_loss.backward()
    opt.step()
    del soft
print(f"sandwich loss {loss.item():.4f} last sub {sub_loss.item():.4f}")
report("slimmable sandwich bf16 adam")

model.eval()
with torch.inference_mode(), bf16:
    x, y = images(EVAL_BATCH)
    accs = {}
    for width in WIDTHS:
        accs[width] = (model(x, width).argmax(1) == y).float().mean().item()
print(f"sub-network acc {accs}")
report("sub-network inference_mode eval")
model.train()

del opt
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=5e-5)
scaler = torch.amp.GradScaler(device, init_scale=2.0**10, enabled=device == "cuda")
fp16 = torch.autocast(device, dtype=torch.float16, enabled=device == "cuda")
for step in range(3):
    x, y = images(BATCH)
    opt.zero_grad(set_to_none=True)
    with fp16:
        logits = model(x, 1.0, DEPTH)
        loss = F.cross_entropy(logits.float(), y)
    scaler.scale(loss).backward()
    soft = F.softmax(logits.detach().float(), -1)
    del logits
    for _ in range(2):
        width, depth = rng.choice(WIDTHS[:3]), rng.choice(DEPTHS[:2])
        with fp16:
            sub_loss = kd(model(x, width, depth), soft)
        scaler.scale(sub_loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    del soft
print(f"ofa loss {loss.item():.4f} scale {scaler.get_scale()}")
report("once-for-all elastic depth fp16 gradscaler sgd")

# extract a sub-network into a standalone model
SUB_HEADS, SUB_FF, SUB_DEPTH = HEADS // 2, FF // 2, DEPTHS[0]
sub = SlimViT(SUB_HEADS, SUB_FF, SUB_DEPTH)
e = SUB_HEADS * HD
with torch.no_grad():
    sd = {}
    for name, p in model.state_dict().items():
        parts = name.split(".")
        if parts[0] == "blocks" and int(parts[1]) >= SUB_DEPTH:
            continue
        leaf = parts[-2] if parts[0] == "blocks" else ""
        if leaf in ("q", "k", "v"):
            p = p[:e]
        elif leaf == "proj" and parts[-1] == "weight":
            p = p[:, :e]
        elif leaf in ("gate", "up"):
            p = p[:SUB_FF]
        elif leaf == "down":
            p = p[:, :SUB_FF]
        sd[name] = p.clone()
    sub.load_state_dict(sd)
    del sd
sub = sub.to(device=device, dtype=torch.bfloat16).eval()
del model, opt, scaler
if device == "cuda":
    torch.cuda.empty_cache()
with torch.inference_mode():
    x, y = images(SUB_BATCH)
    acc = (sub(x.bfloat16()).argmax(1) == y).float().mean().item()
print(f"extracted sub-network acc {acc:.4f}")
report("extracted sub-network bf16 inference")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
