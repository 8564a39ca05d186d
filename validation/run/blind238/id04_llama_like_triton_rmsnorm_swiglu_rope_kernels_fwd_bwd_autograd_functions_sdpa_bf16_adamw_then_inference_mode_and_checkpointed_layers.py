"""A Llama-like decoder whose RMSNorm, SwiGLU and rotary embedding are Triton kernels of its own
(forward and backward, as autograd Functions), with SDPA attention, in bf16.

Kernels: RMSNorm forward per row (y = x * rstd * w, rstd kept in fp32) and backward per row (dx), the
weight gradient by programs of 32 rows into a (programs, d) fp32 buffer summed by torch; SwiGLU forward
silu(a) * b and backward (da, db) elementwise over blocks of 1024; RoPE forward and backward on a
(batch, seq, heads, head_dim) tensor, one program per (token, head), rotating the two halves by
cos / sin tables of (seq, head_dim / 2) (backward rotates by -sin). Each writes new tensors.

Model: 8 layers, d 1024, 16 heads of 64, ffn 2816, vocab 32000, seq 1024, RMSNorm eps 1e-5; bf16
parameters and AdamW (foreach). Phases: 3 steps at batch 8; an inference_mode forward at batch 16
(last-token logits only); 2 steps at batch 16 with every layer under non-reentrant
torch.utils.checkpoint (the Triton Functions recomputed in backward); torch.cuda.empty_cache() and 1
step at batch 8 of the fp32-logits loss. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2384)
device = "cuda"
V, D, NH, HD, FF, NL, S = 32000, 1024, 16, 64, 2816, 8, 1024


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


@triton.jit
def rmsnorm_fwd_kernel(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, x * rstd * w, mask=mask)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def rmsnorm_bwd_kernel(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_part_ptr, n_rows, n_cols,
                       ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, ROWS):
        row = pid * ROWS + i
        if row < n_rows:
            off = row.to(tl.int64) * n_cols
            x = tl.load(x_ptr + off + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + off + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row)
            xhat = x * rstd
            wdy = w * dy
            c = tl.sum(xhat * wdy, axis=0) / n_cols
            tl.store(dx_ptr + off + cols, (wdy - xhat * c) * rstd, mask=mask)
            dw += dy * xhat
    tl.store(dw_part_ptr + pid * n_cols + cols, dw, mask=mask)


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps):
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        n_rows, n_cols = x2.shape
        y = torch.empty_like(x2)
        rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        rmsnorm_fwd_kernel[(n_rows,)](x2, w, y, rstd, n_cols, eps, BLOCK=triton.next_power_of_2(n_cols))
        ctx.save_for_backward(x2, w, rstd)
        ctx.shape = x.shape
        return y.view(x.shape)

    @staticmethod
    def backward(ctx, dy):
        x2, w, rstd = ctx.saved_tensors
        n_rows, n_cols = x2.shape
        dy = dy.reshape(n_rows, n_cols).contiguous()
        dx = torch.empty_like(x2)
        n_prog = triton.cdiv(n_rows, 32)
        dw_part = torch.empty(n_prog, n_cols, dtype=torch.float32, device=x2.device)
        rmsnorm_bwd_kernel[(n_prog,)](dy, x2, w, rstd, dx, dw_part, n_rows, n_cols, ROWS=32,
                                      BLOCK=triton.next_power_of_2(n_cols))
        return dx.view(ctx.shape), dw_part.sum(0).to(w.dtype), None


@triton.jit
def swiglu_fwd_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(c_ptr + offs, a * tl.sigmoid(a) * b, mask=mask)


@triton.jit
def swiglu_bwd_kernel(dc_ptr, a_ptr, b_ptr, da_ptr, db_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    dc = tl.load(dc_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(a)
    silu = a * sig
    tl.store(db_ptr + offs, dc * silu, mask=mask)
    tl.store(da_ptr + offs, dc * b * (sig + silu * (1.0 - sig)), mask=mask)


class SwiGLUFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        a, b = a.contiguous(), b.contiguous()
        c = torch.empty_like(a)
        n = a.numel()
        swiglu_fwd_kernel[(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024)
        ctx.save_for_backward(a, b)
        return c

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        dc = dc.contiguous()
        da, db = torch.empty_like(a), torch.empty_like(b)
        n = a.numel()
        swiglu_bwd_kernel[(triton.cdiv(n, 1024),)](dc, a, b, da, db, n, BLOCK=1024)
        return da, db


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, seq_len, n_heads, sign, HALF: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    pos = (pid // n_heads) % seq_len
    offs = tl.arange(0, HALF)
    base = pid * (2 * HALF)
    x1 = tl.load(x_ptr + base + offs).to(tl.float32)
    x2 = tl.load(x_ptr + base + HALF + offs).to(tl.float32)
    c = tl.load(cos_ptr + pos * HALF + offs)
    s = tl.load(sin_ptr + pos * HALF + offs) * sign
    tl.store(y_ptr + base + offs, x1 * c - x2 * s)
    tl.store(y_ptr + base + HALF + offs, x2 * c + x1 * s)


class RoPEFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin):
        x = x.contiguous()
        y = torch.empty_like(x)
        b, s, h, hd = x.shape
        rope_kernel[(b * s * h,)](x, cos, sin, y, s, h, 1.0, HALF=hd // 2)
        ctx.save_for_backward(cos, sin)
        return y

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        dy = dy.contiguous()
        dx = torch.empty_like(dy)
        b, s, h, hd = dy.shape
        rope_kernel[(b * s * h,)](dy, cos, sin, dx, s, h, -1.0, HALF=hd // 2)
        return dx, None, None


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return RMSNormFn.apply(x, self.weight, 1e-5)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm(D)
        self.wq = nn.Linear(D, D, bias=False)
        self.wk = nn.Linear(D, D, bias=False)
        self.wv = nn.Linear(D, D, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.mlp_norm = RMSNorm(D)
        self.gate = nn.Linear(D, FF, bias=False)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        h = self.attn_norm(x)
        q = RoPEFn.apply(self.wq(h).view(b, s, NH, HD), cos, sin)
        k = RoPEFn.apply(self.wk(h).view(b, s, NH, HD), cos, sin)
        v = self.wv(h).view(b, s, NH, HD)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, D))
        h = self.mlp_norm(x)
        return x + self.down(SwiGLUFn.apply(self.gate(h), self.up(h)))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList([Layer() for _ in range(NL)])
        self.norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
        ang = torch.outer(torch.arange(S).float(), inv)
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.ckpt = False

    def forward(self, idx, last_only=False):
        x = self.embed(idx)
        for layer in self.layers:
            if self.ckpt:
                x = checkpoint(layer, x, self.cos, self.sin, use_reentrant=False)
            else:
                x = layer(x, self.cos, self.sin)
        x = self.norm(x)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(x)


model = Llama().to(device)
model.embed.to(torch.bfloat16)
model.layers.to(torch.bfloat16)
model.norm.to(torch.bfloat16)
model.lm_head.to(torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)


def train_step(b, fp32_logits=False):
    idx = torch.randint(0, V, (b, S), device=device)
    logits = model(idx)
    if fp32_logits:
        logits = logits.float()
    loss = F.cross_entropy(logits.view(-1, V), idx.roll(-1, dims=1).view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


for step in range(3):
    print(f"step {step} loss {train_step(8):.4f}")
report("train bf16 batch 8")

model.eval()
with torch.inference_mode():
    idx = torch.randint(0, V, (16, S), device=device)
    nxt = model(idx, last_only=True).argmax(-1)
    print("next tokens", nxt.shape, nxt[:4, 0].tolist())
del idx, nxt
report("inference_mode batch 16 last-token logits")

model.train()
model.ckpt = True
for step in range(2):
    print(f"checkpointed step {step} loss {train_step(16):.4f}")
report("checkpointed layers batch 16")

model.ckpt = False
torch.cuda.empty_cache()
print(f"fp32-logits step loss {train_step(8, fp32_logits=True):.4f}")
report("fp32 logits batch 8 after empty_cache")
