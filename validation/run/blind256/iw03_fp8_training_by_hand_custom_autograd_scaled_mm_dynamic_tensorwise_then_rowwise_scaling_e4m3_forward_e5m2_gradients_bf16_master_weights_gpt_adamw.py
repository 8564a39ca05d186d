"""fp8 training of a GPT written by hand (6 blocks of width 1024, 16 heads, SDPA causal, MLP 4096,
vocabulary 32000, batch 8 x 1024), the way float8 training recipes do it without torchao: every block
Linear is an autograd Function around `torch._scaled_mm` with dynamic scaling (an amax each call).
Forward casts the input and the bf16 weight to float8_e4m3fn and saves the fp8 casts (not the bf16
tensors) for backward; backward casts the gradient to float8_e5m2 and computes grad_input (e5m2 x
e4m3, the weight's cast made column-major by a contiguous transpose) and grad_weight (the gradient's
transpose made contiguous times the input's cast made column-major). Two recipes on the same model:
tensorwise scales (one fp32 scalar per tensor) for two steps, then rowwise scales (an fp32 (M, 1) for
the left operand and (1, N) for the right, computed along the contraction dimension of each GEMM:
this Function saves the bf16 input and weight and backward re-casts them along the other dimension;
gradients in e4m3 as torchao's rowwise recipe has them) for two steps. Embedding and head in
bf16, bf16 master weights, AdamW (foreach). Then evaluation loss under no_grad. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(25603)
V, D, L, H, T, B = 32000, 1024, 6, 16, 1024, 8
E4M3, E5M2 = torch.finfo(torch.float8_e4m3fn).max, torch.finfo(torch.float8_e5m2).max
RECIPE = {"mode": "tensorwise"}


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def cast_tensorwise(t, dtype, fmax):
    scale = (t.abs().amax().float().clamp(min=1e-12) / fmax).reshape(())
    return (t.float() / scale).clamp(-fmax, fmax).to(dtype), scale


def cast_rowwise(t, dim, dtype, fmax):
    """Scales along `dim` (the contraction dimension), kept with a size-1 dim."""
    scale = t.abs().amax(dim, keepdim=True).float().clamp(min=1e-12) / fmax
    return (t.float() / scale).clamp(-fmax, fmax).to(dtype), scale


class TensorwiseFp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x8, sx = cast_tensorwise(x, torch.float8_e4m3fn, E4M3)
        w8, sw = cast_tensorwise(w, torch.float8_e4m3fn, E4M3)
        ctx.save_for_backward(x8, sx, w8, sw)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        x8, sx, w8, sw = ctx.saved_tensors
        g8, sg = cast_tensorwise(g, torch.float8_e5m2, E5M2)
        gx = torch._scaled_mm(g8, w8.t().contiguous().t(), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)
        gw = torch._scaled_mm(
            g8.t().contiguous(), x8.t().contiguous().t(), scale_a=sg, scale_b=sx, out_dtype=torch.bfloat16
        )
        return gx, gw


class RowwiseFp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x8, sx = cast_rowwise(x, 1, torch.float8_e4m3fn, E4M3)
        w8, sw = cast_rowwise(w, 1, torch.float8_e4m3fn, E4M3)
        ctx.save_for_backward(x, w)
        return torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw.t(), out_dtype=torch.bfloat16)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g8, sg = cast_rowwise(g, 1, torch.float8_e4m3fn, E4M3)
        w8, sw = cast_rowwise(w, 0, torch.float8_e4m3fn, E4M3)  # (N, K), scales (1, K) over N
        gx = torch._scaled_mm(g8, w8.t().contiguous().t(), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)
        gt8, sgt = cast_rowwise(
            g.t().contiguous(), 1, torch.float8_e4m3fn, E4M3
        )  # (N, M), scales (N, 1) over M
        x8, sx = cast_rowwise(x, 0, torch.float8_e4m3fn, E4M3)  # (M, K), scales (1, K) over M
        gw = torch._scaled_mm(gt8, x8.t().contiguous().t(), scale_a=sgt, scale_b=sx, out_dtype=torch.bfloat16)
        return gx, gw


class Fp8Linear(nn.Linear):
    def forward(self, x):
        shape = x.shape
        fn = TensorwiseFp8Linear if RECIPE["mode"] == "tensorwise" else RowwiseFp8Linear
        y = fn.apply(x.reshape(-1, shape[-1]), self.weight)
        return (y + self.bias).reshape(*shape[:-1], -1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = Fp8Linear(D, 3 * D), Fp8Linear(D, D)
        self.fc1, self.fc2 = Fp8Linear(D, 4 * D), Fp8Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.nf = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.nf(x))


model = GPT().cuda().to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
data = torch.randint(0, V, (4, B, T + 1), device="cuda")
report("setup")


def step(i):
    x, y = data[i % 4, :, :-1], data[i % 4, :, 1:]
    loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


step(0)
report("tensorwise step 1")
step(1)
report("tensorwise step 2")
RECIPE["mode"] = "rowwise"
step(2)
step(3)
report("rowwise steps 3-4")
with torch.no_grad():
    ev = F.cross_entropy(model(data[0, :, :-1]).flatten(0, 1).float(), data[0, :, 1:].flatten())
print(f"eval loss {ev.item():.3f}")
report("eval")
