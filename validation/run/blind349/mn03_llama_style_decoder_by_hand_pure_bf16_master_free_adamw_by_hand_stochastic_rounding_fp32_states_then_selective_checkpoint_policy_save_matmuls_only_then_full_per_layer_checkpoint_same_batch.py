"""A Llama-style decoder written by hand (12 layers of 1,024, 16 heads, SwiGLU MLP 2,816, RMSNorm in fp32,
rotary embeddings from cos/sin buffers, `F.scaled_dot_product_attention(is_causal=True)`, vocabulary 32,000,
untied head; 220M parameters) trained in pure bf16 without fp32 master weights, after a CUDA OOM at
8 x 2,048 tokens: the weights and gradients are bf16, AdamW is written by hand with fp32 moments and the
updated weight rounded back to bf16 stochastically (the fp32 result's low 16 bits plus a uniform random
16-bit integer, masked off: `view(torch.int32)`, `randint_like`, `bitwise_and_`), one parameter at a time.

Then the memory remedies at 8 x 2,048: selective activation checkpointing per layer with
`torch.utils.checkpoint.create_selective_checkpoint_contexts` and a policy that saves matmuls only
(`aten.mm` / `aten.addmm` / `aten.bmm` MUST_SAVE, every other op PREFER_RECOMPUTE, so the norms, rotary,
SiLU and attention are recomputed in backward), then plain checkpointing of every layer for comparison at
the same batch.

Phases: 0 model and optimizer state; 1 two steps without checkpointing at 4 x 2,048; 2 two steps at 8 x 2,048
under the matmul-saving policy; 3 two steps at 8 x 2,048 with every layer checkpointed; 4 evaluation under
`no_grad` at 8 x 2,048. Seeded."""

import functools
import math
import os

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(349_03)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, L, H, FF, T, B = 512, 64, 2, 4, 160, 64, 2
else:
    V, D, L, H, FF, T, B = 32000, 1024, 12, 16, 2816, 2048, 4
HD = D // H


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


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.type_as(x)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(D), RMSNorm(D)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(D, D, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, H, HD).transpose(1, 2)
        k = self.wk(h).view(b, t, H, HD).transpose(1, 2)
        v = self.wv(h).view(b, t, H, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, D))
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        freqs = torch.outer(torch.arange(T).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx, mode="none"):
        t = idx.shape[1]
        cos, sin = self.cos[:t].to(torch.bfloat16), self.sin[:t].to(torch.bfloat16)
        x = self.embed(idx)
        for layer in self.layers:
            if mode == "selective":
                x = checkpoint(layer, x, cos, sin, use_reentrant=False, context_fn=sac_context)
            elif mode == "full":
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return self.head(self.norm(x))


MATMULS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


def save_matmuls_only(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in MATMULS else CheckpointPolicy.PREFER_RECOMPUTE


sac_context = functools.partial(create_selective_checkpoint_contexts, save_matmuls_only)

model = Decoder().to(device=device, dtype=torch.bfloat16)
params = [p for p in model.parameters() if p.requires_grad]
state = {
    p: (torch.zeros_like(p, dtype=torch.float32), torch.zeros_like(p, dtype=torch.float32)) for p in params
}
n_step = 0
print(f"{sum(p.numel() for p in params) / 1e6:.1f}M parameters, pure bf16")
report("bf16 decoder and fp32 AdamW moments")


@torch.no_grad()
def adamw_sr_step(lr=3e-4, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
    """AdamW on bf16 weights with fp32 moments; the new weight is rounded to bf16 stochastically."""
    global n_step
    n_step += 1
    bc1, bc2 = 1 - b1**n_step, 1 - b2**n_step
    for p in params:
        g = p.grad.float()
        m, v = state[p]
        m.lerp_(g, 1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        upd = (m / bc1).div_((v / bc2).sqrt_().add_(eps))
        new = p.float().mul_(1 - lr * wd).add_(upd, alpha=-lr)
        bits = new.view(torch.int32)
        bits.add_(torch.randint_like(bits, 0, 1 << 16)).bitwise_and_(-65536)
        p.copy_(bits.view(torch.float32))
        p.grad = None


def train(batch, mode, steps=2):
    for step in range(steps):
        data = torch.randint(0, V, (batch, T + 1), device=device)
        logits = model(data[:, :-1], mode)
        loss = F.cross_entropy(logits.float().view(-1, V), data[:, 1:].reshape(-1))
        del logits
        loss.backward()
        adamw_sr_step()
        print(f"  {mode} step {step}: loss {loss.item():.3f}")


train(B, "none")
report("4 x 2048 without checkpointing, stochastic-rounding AdamW")

train(2 * B, "selective")
report("8 x 2048, selective checkpoint saving matmuls only")

train(2 * B, "full")
report("8 x 2048, every layer checkpointed")

model.eval()
with torch.no_grad():
    data = torch.randint(0, V, (2 * B, T + 1), device=device)
    logits = model(data[:, :-1])
    val = F.cross_entropy(logits.float().view(-1, V), data[:, 1:].reshape(-1))
    del logits
print(f"eval perplexity {math.exp(min(val.item(), 20)):.1f}")
report("evaluation under no_grad at 8 x 2048")
