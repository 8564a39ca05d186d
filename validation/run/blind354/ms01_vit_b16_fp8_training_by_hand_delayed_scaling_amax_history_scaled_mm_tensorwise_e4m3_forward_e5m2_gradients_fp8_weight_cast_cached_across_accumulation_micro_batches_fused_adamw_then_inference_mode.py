"""A ViT-B/16 written by hand (12 layers of 768, 12 heads, MLP 3,072, 224 x 224 images, 1,000 classes)
trained with fp8 matmuls the way delayed-scaling recipes do it, in pure PyTorch: every Linear of the
blocks and the patch embedding (patches cut by reshape/permute, no convolution) is an autograd Function
around `torch._scaled_mm` with per-tensor scales taken from amax history buffers (16 steps, one row each
for input, weight and gradient, rolled after every optimizer step). Forward casts the input to
float8_e4m3fn and multiplies by the fp8 weight; the fp8 weight and its transposed copy (for the
gradient of the input) are cast once per optimizer step and cached across the gradient-accumulation
micro-batches; backward casts the gradient to float8_e5m2 (grad input e5m2 x e4m3 weight in bf16,
grad weight e5m2 x e4m3 input in fp32). Master weights are fp32, AdamW fused, the rest of the model
(LayerNorm, SDPA, GELU, the head) runs under bf16 autocast.

Phases: 0 model, optimizer state and amax buffers; 1 two optimizer steps of 2 micro-batches of 64;
2 two steps of 4 micro-batches of 32; 3 evaluation at batch 256 under `inference_mode` with the fp8
weights cast once; 4 the same evaluation with plain bf16 linears (`F.linear` under autocast). Seeded."""

import os

import torch
import torch.nn.functional as F
from torch import nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(354_01)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    IMG, P, D, L, H, FF, NC, B, HIST = 32, 8, 64, 2, 4, 256, 10, 16, 4
else:
    IMG, P, D, L, H, FF, NC, B, HIST = 224, 16, 768, 12, 12, 3072, 1000, 64, 16
E4M3, E5M2 = torch.finfo(torch.float8_e4m3fn).max, torch.finfo(torch.float8_e5m2).max
NP = (IMG // P) ** 2
USE_FP8 = True


def report(tag):
    if cuda:
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, mod):
        hist = mod.amax_history
        sx = (hist[0].amax() / E4M3).reshape(())
        x8 = (x.float() / sx).clamp(-E4M3, E4M3).to(torch.float8_e4m3fn)
        hist[0, 0] = torch.maximum(hist[0, 0], x.detach().abs().amax().float())
        if mod.w8 is None:
            sw = (hist[1].amax() / E4M3).reshape(())
            hist[1, 0] = w.detach().abs().amax()
            mod.w8 = (w.detach() / sw).clamp(-E4M3, E4M3).to(torch.float8_e4m3fn)  # (N, K)
            mod.w8_t = mod.w8.t().contiguous()  # (K, N): column-major (N, K) for grad input
            mod.sw = sw
        y = torch._scaled_mm(x8, mod.w8.t(), scale_a=sx, scale_b=mod.sw, out_dtype=torch.bfloat16)
        ctx.save_for_backward(x8, sx)
        ctx.mod = mod
        return y

    @staticmethod
    def backward(ctx, g):
        x8, sx = ctx.saved_tensors
        mod = ctx.mod
        hist = mod.amax_history
        sg = (hist[2].amax() / E5M2).reshape(())
        g8 = (g.float() / sg).clamp(-E5M2, E5M2).to(torch.float8_e5m2)
        hist[2, 0] = torch.maximum(hist[2, 0], g.abs().amax().float())
        gx = None
        if ctx.needs_input_grad[0]:
            gx = torch._scaled_mm(g8, mod.w8_t.t(), scale_a=sg, scale_b=mod.sw, out_dtype=torch.bfloat16)
        gw = torch._scaled_mm(
            g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg, scale_b=sx, out_dtype=torch.float32
        )
        return gx, gw, None


class Fp8Linear(nn.Module):
    def __init__(self, din, dout):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dout, din) * 0.02)
        self.bias = nn.Parameter(torch.zeros(dout))
        self.register_buffer("amax_history", torch.ones(3, HIST))
        self.w8 = self.w8_t = self.sw = None

    def forward(self, x):
        if not USE_FP8:
            return F.linear(x, self.weight, self.bias)
        shape = x.shape
        y = Fp8Matmul.apply(x.reshape(-1, shape[-1]), self.weight, self)
        return (y + self.bias.to(y.dtype)).reshape(*shape[:-1], -1)

    def new_step(self):
        self.w8 = self.w8_t = self.sw = None
        with torch.no_grad():
            self.amax_history.copy_(torch.roll(self.amax_history, 1, dims=1))
            self.amax_history[:, 0] = 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = Fp8Linear(D, 3 * D), Fp8Linear(D, D)
        self.fc1, self.fc2 = Fp8Linear(D, FF), Fp8Linear(FF, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = Fp8Linear(3 * P * P, D)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, NP + 1, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, NC)

    def forward(self, img):
        b = img.shape[0]
        g = IMG // P
        patches = img.reshape(b, 3, g, P, g, P).permute(0, 2, 4, 1, 3, 5).reshape(b, NP, 3 * P * P)
        x = self.patch(patches)
        x = torch.cat([self.cls.expand(b, -1, -1).to(x.dtype), x], 1) + self.pos
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x[:, 0]))


model = ViT().to(device)
fp8_linears = [m for m in model.modules() if isinstance(m, Fp8Linear)]
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=cuda)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, {len(fp8_linears)} fp8 linears")
report("fp32 ViT-B/16, AdamW state, amax history buffers")


def train(steps, micro, mb):
    for step in range(steps):
        for _ in range(micro):
            img = torch.randn(mb, 3, IMG, IMG, device=device)
            label = torch.randint(0, NC, (mb,), device=device)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(img), label) / micro
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        for m in fp8_linears:
            m.new_step()
        print(f"  step {step}: loss {loss.item() * micro:.3f}")


train(2, 2, B)
report("2 steps of 2 x 64, fp8 weights cached across micro-batches")

train(2, 4, B // 2)
report("2 steps of 4 x 32")


@torch.inference_mode()
def evaluate(batch):
    img = torch.randn(batch, 3, IMG, IMG, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        pred = model(img).argmax(-1)
    for m in fp8_linears:
        m.w8 = m.w8_t = m.sw = None
    return pred.float().mean().item()


model.eval()
print(f"fp8 eval mean class {evaluate(4 * B):.1f}")
report("fp8 evaluation at batch 256 under inference_mode")

USE_FP8 = False
print(f"bf16 eval mean class {evaluate(4 * B):.1f}")
report("bf16 evaluation at batch 256 under inference_mode")
