"""A decoder-only LM whose hot paths are hand-written `torch.autograd.Function`s, the way people write fused
ops before reaching for Triton: each one checked with `torch.autograd.gradcheck` in float64 first, then the
model trained under bf16 autocast.

The Functions: (a) `SwiGLUFn`, old style (`forward(ctx, ...)`) under `torch.amp.custom_fwd` /
`custom_bwd`, saving only its input and weights and recomputing the gate/up projections in a
`@once_differentiable` backward that honours `ctx.needs_input_grad`; (b) `RMSNormFn`, new style (`forward`
without ctx plus `setup_context`), returning (y, rstd) with rstd marked `ctx.mark_non_differentiable` and
`ctx.set_materialize_grads(False)`, computed in fp32 and cast back; (c) `LayerScaleInplace`, an in-place
per-channel scale of the attention/MLP branch (`ctx.mark_dirty`), which saves its own output and divides the
scale back out in backward. A `torch.autograd.graph.register_multi_grad_hook` over the embedding and head
counts completed backward passes; a prehook on the loss's grad_fn scales the incoming gradient.

Model: 8 layers, width 1,024, 16 heads (SDPA causal), SwiGLU hidden 2,816, vocabulary 32,000, tied head.
Phases: (1) gradcheck of the three Functions on small float64 host tensors, then the model built
on the device and one fp32 forward/backward at 2 x 1,024; (2) 6 training steps at 8 x 1,024
tokens under bf16 autocast, AdamW (foreach), grad-norm clipping; (3) evaluation under `torch.no_grad` of
4 batches, perplexity; (4) `model.half()` scoring of 16 x 1,024 under `torch.inference_mode`, the per-token
log-probabilities gathered."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

torch.manual_seed(30901)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, CTX, WIDTH, HEADS, LAYERS, HIDDEN, B = 32000, 1024, 1024, 16, 8, 2816, 8


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class SwiGLUFn(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, w_gate, w_up):
        ctx.save_for_backward(x, w_gate, w_up)
        return F.silu(x @ w_gate.t()) * (x @ w_up.t())

    @staticmethod
    @once_differentiable
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        x, w_gate, w_up = ctx.saved_tensors
        g = x @ w_gate.t()
        u = x @ w_up.t()
        sg = torch.sigmoid(g)
        d_u = grad * (g * sg)
        d_g = grad * u * sg * (1 + g * (1 - sg))
        del g, u, sg
        dx = dwg = dwu = None
        if ctx.needs_input_grad[0]:
            dx = d_g @ w_gate + d_u @ w_up
        x2 = x.reshape(-1, x.shape[-1])
        if ctx.needs_input_grad[1]:
            dwg = d_g.reshape(-1, d_g.shape[-1]).t() @ x2
        if ctx.needs_input_grad[2]:
            dwu = d_u.reshape(-1, d_u.shape[-1]).t() @ x2
        return dx, dwg, dwu


class RMSNormFn(torch.autograd.Function):
    @staticmethod
    def forward(x, weight, eps):
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        y = (xf * rstd).to(x.dtype) * weight
        return y, rstd

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, _ = inputs
        _, rstd = output
        ctx.mark_non_differentiable(rstd)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, weight, rstd)

    @staticmethod
    def backward(ctx, grad_y, grad_rstd):
        if grad_y is None:
            return None, None, None
        x, weight, rstd = ctx.saved_tensors
        xhat = x.to(rstd.dtype) * rstd
        gw = grad_y.to(rstd.dtype) * weight.to(rstd.dtype)
        dx = rstd * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
        dweight = (grad_y.to(rstd.dtype) * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)
        return dx.to(x.dtype), dweight, None


class LayerScaleInplace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y, gamma):
        y.mul_(gamma)
        ctx.mark_dirty(y)
        ctx.save_for_backward(y, gamma)
        return y

    @staticmethod
    def backward(ctx, grad):
        y, gamma = ctx.saved_tensors
        dgamma = (grad * (y / gamma)).reshape(-1, y.shape[-1]).sum(0)
        return grad * gamma, dgamma.to(gamma.dtype)


def rmsnorm(x, weight):
    return RMSNormFn.apply(x, weight, 1e-6)[0]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.Parameter(torch.ones(WIDTH))
        self.n2 = nn.Parameter(torch.ones(WIDTH))
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.w_gate = nn.Parameter(torch.randn(HIDDEN, WIDTH) / math.sqrt(WIDTH))
        self.w_up = nn.Parameter(torch.randn(HIDDEN, WIDTH) / math.sqrt(WIDTH))
        self.down = nn.Linear(HIDDEN, WIDTH, bias=False)
        self.ls1 = nn.Parameter(torch.full((WIDTH,), 0.1))
        self.ls2 = nn.Parameter(torch.full((WIDTH,), 0.1))

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(rmsnorm(x, self.n1)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + LayerScaleInplace.apply(self.out(att.transpose(1, 2).reshape(b, t, WIDTH)), self.ls1)
        h = SwiGLUFn.apply(rmsnorm(x, self.n2), self.w_gate, self.w_up)
        return x + LayerScaleInplace.apply(self.down(h), self.ls2)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        nn.init.normal_(self.tok.weight, std=0.02)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.Parameter(torch.ones(WIDTH))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(rmsnorm(x, self.norm))


# Phase 1: gradcheck of the Functions in float64 on the host, then one fp32 step of the model at batch 2.
opts = dict(dtype=torch.float64, requires_grad=True)
ok = torch.autograd.gradcheck(
    SwiGLUFn.apply, (torch.randn(2, 5, 16, **opts), torch.randn(24, 16, **opts), torch.randn(24, 16, **opts))
)
ok &= torch.autograd.gradcheck(
    lambda x, w: RMSNormFn.apply(x, w, 1e-6)[0], (torch.randn(3, 7, 32, **opts), torch.randn(32, **opts))
)
ok &= torch.autograd.gradcheck(
    lambda y, g: LayerScaleInplace.apply(y * 1.0, g),
    (torch.randn(4, 9, 16, **opts), torch.rand(16, **opts) + 0.5),
)
print("gradcheck", ok)
model = LM().to(device)
warm = torch.randint(0, VOCAB, (2, CTX + 1), device=device)
F.cross_entropy(model(warm[:, :-1]).view(-1, VOCAB), warm[:, 1:].reshape(-1)).backward()
model.zero_grad(set_to_none=True)
report("phase 1 gradcheck and fp32 warm-up")

# Phase 2: training under bf16 autocast.
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
passes = []
torch.autograd.graph.register_multi_grad_hook(
    (model.tok.weight, model.blocks[0].qkv.weight), lambda grads: passes.append(len(grads))
)
data = torch.randint(0, VOCAB, (6, B, CTX + 1), device=device)
for step in range(6):
    idx, tgt = data[step, :, :-1], data[step, :, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx)
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), tgt.reshape(-1))
    loss.grad_fn.register_prehook(lambda grad_outputs: tuple(g * 0.5 for g in grad_outputs))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
del logits, loss
print("multi-grad hook fired", len(passes))
report("phase 2 train")

# Phase 3: evaluation.
model.eval()
total = 0.0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(4):
        batch = torch.randint(0, VOCAB, (B, CTX + 1), device=device)
        logits = model(batch[:, :-1])
        total += F.cross_entropy(logits.float().view(-1, VOCAB), batch[:, 1:].reshape(-1)).item()
del logits
print(f"eval ppl {math.exp(total / 4):.1f}")
report("phase 3 eval")

# Phase 4: fp16 scoring under inference_mode.
del opt
model.half()
with torch.inference_mode():
    batch = torch.randint(0, VOCAB, (16, CTX + 1), device=device)
    logp = torch.log_softmax(model(batch[:, :-1]).float(), dim=-1)
    tok_lp = logp.gather(-1, batch[:, 1:, None]).squeeze(-1)
    del logp
    print("mean token logprob", tok_lp.mean().item())
report("phase 4 fp16 scoring")
