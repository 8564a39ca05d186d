"""MLP-Mixer (Tolstikhin et al. 2021, Mixer-S/16 as timm's MlpMixer builds it: a 16 x 16 Conv2d
stem, pre-norm mixer blocks with a token-mixing MLP over the 196 patches and a channel-mixing MLP,
global average pooling and a linear head) trained in pure bf16 with float8 channel-mixing linears
written by hand after torchao's rowwise recipe ("rowwise_with_gw_hp"): a custom autograd.Function
quantizes the activation per row and the weight per output channel to float8_e4m3fn and runs
`torch._scaled_mm` with rowwise scales ((M, 1) and (1, N) fp32) and bf16 output; in backward the
incoming gradient is quantized per row and the weight again per input channel (the column-major
copy `_scaled_mm` wants) for grad input, and grad weight is taken in bf16 (high precision). The
token-mixing linears stay bf16 nn.Linear (196 is not a multiple of 16, as torchao skips them).
Optimizer: AdamW by hand over bf16 weights with bf16 moments updated by `torch._foreach_*`, the
weight update computed in fp32 and stochastically rounded back to bf16 (random 16-bit noise added
to the fp32 bit pattern through an int32 view, low half masked off). 8 blocks of width 512 (token
MLP 256, channel MLP 2048), 1,000 classes, batch 128 at 224 x 224; 3 steps (each its own phase)
and a no_grad evaluation at batch 256; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16602)
if SMALL:
    IMG, PATCH, C, LAYERS, TOK_H, CH_H, CLASSES, B, B_EVAL = 32, 8, 64, 2, 32, 128, 10, 4, 8
else:
    IMG, PATCH, C, LAYERS, TOK_H, CH_H, CLASSES, B, B_EVAL = 224, 16, 512, 8, 256, 2048, 1000, 128, 256
N_TOK = (IMG // PATCH) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3 = torch.float8_e4m3fn
FMAX = torch.finfo(E4M3).max
bf16 = torch.bfloat16


def quant_rows(t):
    scale = t.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12) / FMAX
    return (t.float() / scale).clamp(-FMAX, FMAX).to(E4M3), scale


def quant_cols(t):
    scale = t.abs().amax(dim=0, keepdim=True).float().clamp(min=1e-12) / FMAX
    return (t.float() / scale).clamp(-FMAX, FMAX).to(E4M3), scale


def scaled_mm_rowwise(a, b, scale_a, scale_b):
    if a.is_cuda:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=bf16)
    return ((a.float() * scale_a) @ (b.float() * scale_b)).to(bf16)  # CPU: per-tensor scales only


class RowwiseFp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x8, xs = quant_rows(x)
        w8, ws = quant_rows(w)
        out = scaled_mm_rowwise(x8, w8.t(), xs, ws.reshape(1, -1))
        ctx.save_for_backward(x, w)
        return out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g8, gs = quant_rows(g)
        w8c, wcs = quant_cols(w)
        grad_x = scaled_mm_rowwise(g8, w8c.t().contiguous().t(), gs, wcs)
        grad_w = g.t() @ x
        return grad_x, grad_w


class Fp8RowwiseLinear(nn.Linear):
    def forward(self, x):
        shape = x.shape
        y = RowwiseFp8Matmul.apply(x.reshape(-1, shape[-1]), self.weight)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], -1)


class Mlp(nn.Module):
    def __init__(self, d, h, linear):
        super().__init__()
        self.fc1, self.fc2 = linear(d, h), linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(C, eps=1e-6)
        self.mlp_tokens = Mlp(N_TOK, TOK_H, nn.Linear)
        self.norm2 = nn.LayerNorm(C, eps=1e-6)
        self.mlp_channels = Mlp(C, CH_H, Fp8RowwiseLinear)

    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.mlp_channels(self.norm2(x))


class MlpMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, C, PATCH, PATCH)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(C, eps=1e-6)
        self.head = nn.Linear(C, CLASSES)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = self.norm(self.blocks(x))
        return self.head(x.mean(1))


class StochasticRoundingAdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05):
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        self.step_count = 0

    @torch.no_grad()
    def step(self):
        self.step_count += 1
        b1, b2 = self.betas
        grads = [p.grad for p in self.params]
        torch._foreach_lerp_(self.exp_avg, grads, 1 - b1)
        torch._foreach_mul_(self.exp_avg_sq, b2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, value=1 - b2)
        bc1, bc2 = 1 - b1**self.step_count, 1 - b2**self.step_count
        step_size = self.lr / bc1
        for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq, strict=True):
            p32 = p.float()
            p32.mul_(1 - self.lr * self.wd)
            denom = (v.float() / bc2).sqrt_().add_(self.eps)
            p32.addcdiv_(m.float(), denom, value=-step_size)
            bits = p32.view(torch.int32)
            bits.add_(torch.randint_like(bits, 0, 1 << 16)).bitwise_and_(-65536)
            p.copy_(p32)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


model = MlpMixer().to(device=device, dtype=bf16)
opt = StochasticRoundingAdamW(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device, dtype=bf16)
    labels = torch.randint(0, CLASSES, (B,), device=device)
    logits = model(images)
    loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
with torch.no_grad():
    images = torch.randn(B_EVAL, 3, IMG, IMG, device=device, dtype=bf16)
    labels = torch.randint(0, CLASSES, (B_EVAL,), device=device)
    acc = (model(images).argmax(-1) == labels).float().mean()
if device == "cuda":
    print(
        f"eval acc {acc.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
