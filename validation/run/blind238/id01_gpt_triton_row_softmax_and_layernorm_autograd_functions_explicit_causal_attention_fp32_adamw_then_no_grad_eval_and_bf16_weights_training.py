"""A GPT whose attention softmax and layer norms are Triton kernels of its own, as autograd Functions.

Kernels (written after the Triton tutorials' fused softmax and layer norm): a row softmax, one program
per row, with its backward (dx = y * (dy - sum(y * dy))); a layer norm forward storing each row's mean
and reciprocal std, and a backward whose programs each take 64 rows, write their rows' dx and their
partial weight and bias gradients into (programs, N) fp32 buffers that torch then sums. Every kernel
loads in fp32 and stores in the tensors' own dtype.

Model: 6 layers, d 768, 12 heads, seq 512, vocab 8192, explicit causal attention (q @ k^T * scale,
masked_fill of a bool triu mask, the Triton softmax over the last dim, @ v), GELU MLP; the embeddings
and the LM head (tied, N(0, 0.02) init) are torch's. Phases: 3 fp32 steps of AdamW at batch 16; a no_grad evaluation at
batch 32; the model cast to bfloat16 and 3 steps of AdamW (fresh optimizer) at batch 16; a bf16
no_grad pass at batch 48 after torch.cuda.empty_cache(). 4 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

torch.manual_seed(2381)
device = "cuda"
V, D, NH, NL, S = 8192, 768, 12, 6, 512


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@triton.jit
def softmax_fwd_kernel(x_ptr, y_ptr, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_stride + cols, num / den, mask=mask)


@triton.jit
def softmax_bwd_kernel(dy_ptr, y_ptr, dx_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dy = tl.load(dy_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=0)
    tl.store(dx_ptr + row * stride + cols, y * (dy - dot), mask=mask)


class TritonSoftmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
        n_rows, n_cols = x2.shape
        block = triton.next_power_of_2(n_cols)
        softmax_fwd_kernel[(n_rows,)](x2, y, n_cols, x2.stride(0), y.stride(0), BLOCK=block, num_warps=4)
        ctx.save_for_backward(y)
        ctx.shape = shape
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dy = dy.reshape(y.shape).contiguous()
        dx = torch.empty_like(y)
        n_rows, n_cols = y.shape
        block = triton.next_power_of_2(n_cols)
        softmax_bwd_kernel[(n_rows,)](dy, y, dx, n_cols, y.stride(0), BLOCK=block, num_warps=4)
        return dx.view(ctx.shape)


@triton.jit
def layernorm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, n_cols, eps,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    xc = tl.where(mask, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, xc * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layernorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_part_ptr, db_part_ptr,
                         stride, n_rows, n_cols, ROWS_PER_PROG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    db_acc = tl.zeros((BLOCK,), dtype=tl.float32)
    row_start = pid * ROWS_PER_PROG
    for i in range(0, ROWS_PER_PROG):
        row = row_start + i
        if row < n_rows:
            off = row.to(tl.int64) * stride
            x = tl.load(x_ptr + off + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + off + cols, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + row)
            rstd = tl.load(rstd_ptr + row)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            wdy = tl.where(mask, w * dy, 0.0)
            c1 = tl.sum(xhat * wdy, axis=0) / n_cols
            c2 = tl.sum(wdy, axis=0) / n_cols
            dx = (wdy - (xhat * c1 + c2)) * rstd
            tl.store(dx_ptr + off + cols, dx, mask=mask)
            dw_acc += dy * xhat
            db_acc += dy
    tl.store(dw_part_ptr + pid * n_cols + cols, dw_acc, mask=mask)
    tl.store(db_part_ptr + pid * n_cols + cols, db_acc, mask=mask)


class TritonLayerNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        n_rows, n_cols = x2.shape
        y = torch.empty_like(x2)
        mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        block = triton.next_power_of_2(n_cols)
        layernorm_fwd_kernel[(n_rows,)](x2, y, weight, bias, mean, rstd, x2.stride(0), n_cols, eps,
                                        BLOCK=block, num_warps=4)
        ctx.save_for_backward(x2, weight, mean, rstd)
        ctx.shape = shape
        return y.view(shape)

    @staticmethod
    def backward(ctx, dy):
        x2, weight, mean, rstd = ctx.saved_tensors
        n_rows, n_cols = x2.shape
        dy = dy.reshape(n_rows, n_cols).contiguous()
        dx = torch.empty_like(x2)
        rows_per_prog = 64
        n_prog = triton.cdiv(n_rows, rows_per_prog)
        dw_part = torch.empty(n_prog, n_cols, dtype=torch.float32, device=x2.device)
        db_part = torch.empty(n_prog, n_cols, dtype=torch.float32, device=x2.device)
        layernorm_bwd_kernel[(n_prog,)](dy, x2, weight, mean, rstd, dx, dw_part, db_part, x2.stride(0), n_rows,
                                        n_cols, ROWS_PER_PROG=rows_per_prog,
                                        BLOCK=triton.next_power_of_2(n_cols), num_warps=4)
        dw = dw_part.sum(0).to(weight.dtype)
        db = db_part.sum(0).to(weight.dtype)
        return dx.view(ctx.shape), dw, db, None


class LayerNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return TritonLayerNormFn.apply(x, self.weight, self.bias, 1e-5)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x, causal):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, NH, D // NH).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // NH))
        scores = scores.masked_fill(causal[:s, :s], float("-inf"))
        att = TritonSoftmax.apply(scores)
        y = (att @ v).transpose(1, 2).reshape(b, s, D)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(S, D)
        self.blocks = nn.ModuleList([Block() for _ in range(NL)])
        self.ln_f = LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight
        self.register_buffer("causal", torch.triu(torch.ones(S, S, dtype=torch.bool), diagonal=1))
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x, self.causal)
        return self.head(self.ln_f(x))


model = GPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
for step in range(3):
    idx = torch.randint(0, V, (16, S), device=device)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, V), idx.roll(-1, dims=1).view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"fp32 step {step} loss {loss.item():.4f}")
del idx, logits, loss
report("train fp32 triton softmax + layernorm")

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (32, S), device=device)
    logits = model(idx)
    ppl = torch.exp(F.cross_entropy(logits.view(-1, V), idx.roll(-1, dims=1).view(-1)))
    print(f"eval ppl {ppl.item():.1f}")
del idx, logits, ppl
report("eval no_grad batch 32")

model.train()
del opt
model.to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
for step in range(3):
    idx = torch.randint(0, V, (16, S), device=device)
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, V).float(), idx.roll(-1, dims=1).view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"bf16 step {step} loss {loss.item():.4f}")
del idx, logits, loss
report("train bf16 weights")

torch.cuda.empty_cache()
model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (48, S), device=device)
    logits = model(idx)
    print("bf16 eval", tuple(logits.shape), logits[:, -1].float().softmax(-1).max(-1)[0].mean().item())
report("eval bf16 no_grad batch 48")
