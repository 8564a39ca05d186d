"""Pure-bf16 training of a small Llama with AnyPrecisionAdamW written out by hand (pytorch/torchdistx's
optimizers/anyprecision_optimizer.py, as torchtune and the Llama-recipes FSDP examples use it):
bf16 weights, bf16 momentum and variance, and Kahan summation with a bf16 compensation buffer per
parameter (the update added into the compensation, the parameter cloned, the compensation added to
the parameter, the lost low bits taken back into the compensation), the step count a CPU tensor.
The Llama (RMSNorm, rotary embeddings, grouped-query attention of 16 query and 8 KV heads through
SDPA with `enable_gqa=True`, SwiGLU, untied head) has each decoder layer under
`torch.utils.checkpoint` (use_reentrant=False); 12 layers of width 1024 (FFN 2816), vocab 32,000,
batch 4 x 2,048 tokens, 3 steps (each its own phase); then a bf16 no_grad evaluation, and the model
quantized in place to int8 weight-only (per-channel symmetric scales, dequantized on the fly in
the forward) and evaluated again on the same batch with its perplexity against bf16's; 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16606)
if SMALL:
    D, LAYERS, HQ, HKV, FFN, VOCAB, B, T = 128, 2, 4, 2, 352, 512, 2, 64
else:
    D, LAYERS, HQ, HKV, FFN, VOCAB, B, T = 1024, 12, 16, 8, 2816, 32000, 4, 2048
HD = D // HQ
device = "cuda" if torch.cuda.is_available() else "cpu"
bf16 = torch.bfloat16


class AnyPrecisionAdamW(torch.optim.Optimizer):
    def __init__(
        self,
        params,
        lr=1e-3,
        betas=(0.9, 0.999),
        eps=1e-8,
        weight_decay=0.0,
        use_kahan_summation=True,
        momentum_dtype=bf16,
        variance_dtype=bf16,
        compensation_buffer_dtype=bf16,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            use_kahan_summation=use_kahan_summation,
            momentum_dtype=momentum_dtype,
            variance_dtype=variance_dtype,
            compensation_buffer_dtype=compensation_buffer_dtype,
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
            use_kahan_summation = group["use_kahan_summation"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p, dtype=group["momentum_dtype"])
                    state["exp_avg_sq"] = torch.zeros_like(p, dtype=group["variance_dtype"])
                    if use_kahan_summation:
                        state["compensation"] = torch.zeros_like(p, dtype=group["compensation_buffer_dtype"])
                state["step"] += 1
                step = state["step"]
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                if weight_decay:
                    p.data.mul_(1 - lr * weight_decay)
                exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                bias_correction1 = 1 - beta1**step
                step_size = lr / bias_correction1
                denom_correction = (1 - beta2**step) ** 0.5
                centered_variance = (exp_avg_sq.sqrt() / denom_correction).add_(eps, alpha=1)
                if use_kahan_summation:
                    compensation = state["compensation"]
                    compensation.addcdiv_(exp_avg, centered_variance, value=-step_size)
                    temp_buffer = p.detach().clone()
                    p.data.add_(compensation)
                    compensation.add_(temp_buffer.sub_(p.data))
                else:
                    p.data.addcdiv_(exp_avg, centered_variance, value=-step_size)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


def rope_cache(t):
    inv = 1.0 / (500000.0 ** (torch.arange(0, HD, 2, device=device).float() / HD))
    f = torch.outer(torch.arange(t, device=device).float(), inv)
    return torch.cat([f, f], -1).cos().to(bf16), torch.cat([f, f], -1).sin().to(bf16)


def apply_rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(D), RMSNorm(D)
        self.q_proj = nn.Linear(D, HQ * HD, bias=False)
        self.k_proj = nn.Linear(D, HKV * HD, bias=False)
        self.v_proj = nn.Linear(D, HKV * HD, bias=False)
        self.o_proj = nn.Linear(HQ * HD, D, bias=False)
        self.gate_proj = nn.Linear(D, FFN, bias=False)
        self.up_proj = nn.Linear(D, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, t, HQ, HD).transpose(1, 2)
        k = self.k_proj(h).view(b, t, HKV, HD).transpose(1, 2)
        v = self.v_proj(h).view(b, t, HKV, HD).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, D))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.output = nn.Linear(D, VOCAB, bias=False)
        self.gradient_checkpointing = True

    def forward(self, idx):
        cos, sin = rope_cache(idx.shape[1])
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            if self.gradient_checkpointing and self.training:
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return self.output(self.norm(x))


class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        scales = w.abs().amax(dim=1).clamp(min=1e-6) / 127.0
        self.register_buffer("weight", torch.round(w / scales[:, None]).clamp(-128, 127).to(torch.int8))
        self.register_buffer("scales", scales.to(bf16))

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype) * self.scales[:, None])


@torch.no_grad()
def quantize_(module):
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8WeightOnlyLinear(child))
        else:
            quantize_(child)


model = Llama().to(device=device, dtype=bf16)
opt = AnyPrecisionAdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
gen = torch.Generator(device=device).manual_seed(16606)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    tokens = torch.randint(0, VOCAB, (B, T + 1), device=device, generator=gen)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.view(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
    loss.backward()
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
tokens = torch.randint(0, VOCAB, (B, T + 1), device=device, generator=gen)
with torch.no_grad():
    nll_bf16 = F.cross_entropy(model(tokens[:, :-1]).view(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"bf16 eval ppl {nll_bf16.exp().item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del opt
quantize_(model)
with torch.no_grad():
    nll_int8 = F.cross_entropy(model(tokens[:, :-1]).view(-1, VOCAB).float(), tokens[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"int8 eval ppl {nll_int8.exp().item():.1f} vs {nll_bf16.exp().item():.1f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
