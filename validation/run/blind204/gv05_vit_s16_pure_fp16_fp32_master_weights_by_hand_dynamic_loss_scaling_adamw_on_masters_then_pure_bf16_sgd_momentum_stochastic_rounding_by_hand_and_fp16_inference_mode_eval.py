"""Low-precision training of a hand-written ViT-S/16 with master weights and stochastic rounding kept by
hand (no autocast, no GradScaler).

Model: ViT-S/16 for 224x224 images and 1000 classes: Conv2d patch embedding, class token, learned
positions, 12 pre-LN blocks of width 384 with 6 heads (qkv Linear, SDPA, proj) and MLP 1536 with GELU,
final LayerNorm and head.

Part 1 (mixed precision the Apex-O2 way): the model is converted with .half(); fp32 master copies of
every parameter are kept by hand and are what AdamW (foreach, lr 5e-4, weight decay 0.05) steps.
Dynamic loss scaling by hand: the fp16 loss is multiplied by the scale (start 2**16) before backward; the
fp16 gradients are copied to fp32 (one .float() per parameter), unscaled with torch._foreach_mul_, their
total norm from torch._foreach_norm checked for inf/nan (skip and halve on overflow, double after 200
good steps) and clipped to 1.0; after the step the masters are copied back into the fp16 parameters with
torch._foreach_copy_. Batch 128.

Part 2 (pure bf16 with stochastic rounding): a fresh model converted with .bfloat16(); SGD with momentum
0.9 written by hand with fp32 momentum buffers; each update is computed in fp32 and rounded
stochastically to bf16 by adding random 16-bit integers to the float32 bit pattern (int32 view) and
masking the low 16 bits. Batch 128.

Phases: the first fp16 step; 3 more fp16 steps; the first bf16 stochastic-rounding step; 3 more;
evaluation of the fp16 model under inference_mode at batch 512. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2045)
if SMALL:
    RES, PATCH, D, DEPTH, HEADS, BATCH, EVAL_BATCH = 32, 8, 64, 2, 2, 4, 8
else:
    RES, PATCH, D, DEPTH, HEADS, BATCH, EVAL_BATCH = 224, 16, 384, 12, 6, 128, 512
CLASSES = 1000
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.norm2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        b, n, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, D))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, PATCH, PATCH)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, (RES // PATCH) ** 2 + 1, D) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(DEPTH)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def batch(n, dtype):
    x = torch.randn(n, 3, RES, RES, device=device, dtype=dtype)
    y = torch.randint(0, CLASSES, (n,), device=device)
    return x, y


# Part 1: fp16 model, fp32 masters, dynamic loss scaling by hand.
model = ViT().to(device).half()
params = list(model.parameters())
masters = [p.detach().float().clone().requires_grad_(True) for p in params]
opt = torch.optim.AdamW(masters, lr=5e-4, weight_decay=0.05, foreach=True)
scale, good_steps = 2.0**16, 0


def fp16_step():
    global scale, good_steps
    x, y = batch(BATCH, torch.float16)
    loss = F.cross_entropy(model(x).float(), y)
    (loss * scale).backward()
    grads = [p.grad.float() for p in params]
    for p in params:
        p.grad = None
    torch._foreach_mul_(grads, 1.0 / scale)
    norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    if not torch.isfinite(norm):
        scale /= 2
        good_steps = 0
        return loss.item(), True
    torch._foreach_mul_(grads, min(1.0, 1.0 / (norm.item() + 1e-6)))
    for m, g in zip(masters, grads, strict=True):
        m.grad = g
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_copy_(params, masters)
    good_steps += 1
    if good_steps == 200:
        scale, good_steps = scale * 2, 0
    return loss.item(), False


model.train()
loss, skipped = fp16_step()
print(f"fp16 step 0 loss {loss:.4f} skipped {skipped} scale {scale}")
report("fp16 first step")
for _ in range(3):
    loss, skipped = fp16_step()
print(f"fp16 step 3 loss {loss:.4f} skipped {skipped} scale {scale}")
report("fp16 train")


# Part 2: pure bf16 with stochastic rounding and momentum kept in fp32.
def stochastic_round_bf16(x32):
    bits = x32.view(torch.int32)
    noise = torch.randint_like(bits, 0, 1 << 16)
    return ((bits + noise) & -65536).view(torch.float32).to(torch.bfloat16)


bmodel = ViT().to(device).bfloat16().train()
bparams = list(bmodel.parameters())
momenta = [torch.zeros_like(p, dtype=torch.float32) for p in bparams]
LR, MOM, WD = 0.05, 0.9, 1e-4


def bf16_step():
    x, y = batch(BATCH, torch.bfloat16)
    loss = F.cross_entropy(bmodel(x).float(), y)
    loss.backward()
    with torch.no_grad():
        for p, buf in zip(bparams, momenta, strict=True):
            w = p.float()
            g = p.grad.float().add_(w, alpha=WD)
            buf.mul_(MOM).add_(g)
            p.copy_(stochastic_round_bf16(w.add_(buf, alpha=-LR)))
            p.grad = None
    return loss.item()


print(f"bf16 step 0 loss {bf16_step():.4f}")
report("bf16 sr first step")
for _ in range(3):
    loss = bf16_step()
print(f"bf16 step 3 loss {loss:.4f}")
report("bf16 sr train")

model.eval()
with torch.inference_mode():
    x, y = batch(EVAL_BATCH, torch.float16)
    top1 = (model(x).argmax(-1) == y).float().mean().item()
print(f"fp16 eval top1 {top1:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
