"""FP8 training of a GPT written by hand the way Transformer Engine's delayed scaling works, with
`torch._scaled_mm` alone: every projection is a Float8Linear whose autograd Function casts the
bf16 input and the fp32 master weight to e4m3 with per-tensor scales taken from 16-step amax
histories, multiplies them with bf16 output, and in backward casts the incoming gradient to e5m2
(its own amax history updated there) for the two gradient GEMMs (the transposes made contiguous
as `_scaled_mm` wants its second operand column-major); attention by SDPA and the rest under bf16
autocast, fp32 master weights, fused AdamW; 8 layers of width 2048 at 8 x 2048 tokens, 4 steps
and a no_grad evaluation; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12401)
D, LAYERS, HEADS, VOCAB = (128, 2, 4, 512) if SMALL else (2048, 8, 16, 32000)
B, T = (2, 64) if SMALL else (8, 2048)
HIST = 16
device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
E4_MAX, E5_MAX = torch.finfo(E4M3).max, torch.finfo(E5M2).max


def push_amax(hist, t):
    amax = t.detach().abs().amax().float()
    hist.copy_(torch.roll(hist, 1))
    hist[0] = amax
    return hist.max().clamp(min=1e-12)


def to_fp8(t, scale, dtype, fmax):
    return (t.float() * scale).clamp(-fmax, fmax).to(dtype)


class Fp8Matmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, hist_x, hist_w, hist_g):
        with torch.no_grad():
            sx = E4_MAX / push_amax(hist_x, x)
            sw = E4_MAX / push_amax(hist_w, w)
        x8 = to_fp8(x, sx, E4M3, E4_MAX)
        w8 = to_fp8(w, sw, E4M3, E4_MAX)
        out = torch._scaled_mm(
            x8, w8.t(), scale_a=sx.reciprocal(), scale_b=sw.reciprocal(), out_dtype=torch.bfloat16
        )
        ctx.save_for_backward(x8, w8, sx, sw)
        ctx.hist_g = hist_g
        return out

    @staticmethod
    def backward(ctx, g):
        x8, w8, sx, sw = ctx.saved_tensors
        with torch.no_grad():
            sg = E5_MAX / push_amax(ctx.hist_g, g)
        g8 = to_fp8(g, sg, E5M2, E5_MAX)
        gx = torch._scaled_mm(
            g8,
            w8.t().contiguous().t(),
            scale_a=sg.reciprocal(),
            scale_b=sw.reciprocal(),
            out_dtype=torch.bfloat16,
        )
        gw = torch._scaled_mm(
            g8.t().contiguous(),
            x8.t().contiguous().t(),
            scale_a=sg.reciprocal(),
            scale_b=sx.reciprocal(),
            out_dtype=torch.bfloat16,
        )
        return gx, gw.float(), None, None, None


class Float8Linear(nn.Linear):
    def __init__(self, i, o):
        super().__init__(i, o, bias=False)
        for n in ("hist_x", "hist_w", "hist_g"):
            self.register_buffer(n, torch.zeros(HIST))

    def forward(self, x):
        shape = x.shape
        y = Fp8Matmul.apply(
            x.reshape(-1, shape[-1]).to(torch.bfloat16), self.weight, self.hist_x, self.hist_w, self.hist_g
        )
        return y.reshape(*shape[:-1], -1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = Float8Linear(D, 3 * D), Float8Linear(D, D)
        self.fc, self.out = Float8Linear(D, 4 * D), Float8Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), fused=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(4):
    idx = torch.randint(0, VOCAB, (B, T + 1), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), idx[:, 1:].reshape(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    idx = torch.randint(0, VOCAB, (B, T + 1), device=device)
    logits = model(idx[:, :-1])
    ppl = F.cross_entropy(logits.float().view(-1, VOCAB), idx[:, 1:].reshape(-1)).exp()
    hist = model.blocks[0].qkv.hist_g
if device == "cuda":
    print(
        f"eval ppl {ppl.item():.1f} g-amax {hist.max().item():.3e} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
