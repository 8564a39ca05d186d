"""A RetNet language model written by hand after the paper's pseudocode and torchscale's
MultiScaleRetention: 8 layers 1,024 wide, 8 heads with key dimension 128 and value dimension 256
(value and gate projections to 2,048), per-head decays gamma = 1 - 2^(-5 - h), xPos-style rotary
on queries and keys, the retention in its chunkwise form for training (chunks of 256: the inner
chunk's (Q K^T * D) V with a decay mask built from exp(log gamma * (i - j)) and tril, the cross-
chunk term Q S times the decays, the state S updated with gamma^chunk and K^T V weighted by the
in-chunk decays), a GroupNorm over heads, a swish gate, a GELU FFN of 2,048; vocabulary 32,000.
fp32 with TF32 matmuls, Adam (betas 0.9/0.98, weight decay 0.05) with a linear warmup LambdaLR,
batch 6 x 2,048, 3 steps (the first its own phase), an evaluation at 2 x 8,192 in the chunkwise
form under no_grad, then the recurrent form: a chunkwise prefill of 512 tokens for 32 prompts
returning each layer's state (B, 8, 128, 256), then 48 greedy tokens one at a time under
inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15605)
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    V, D, H, LAYERS, FFN, B, T, CHUNK = 128, 32, 2, 2, 64, 2, 32, 8
    EVAL_B, EVAL_T, GEN_B, PROMPT, NEW = 1, 64, 2, 16, 4
else:
    V, D, H, LAYERS, FFN, B, T, CHUNK = 32000, 1024, 8, 8, 2048, 6, 2048, 256
    EVAL_B, EVAL_T, GEN_B, PROMPT, NEW = 2, 8192, 32, 512, 48
DK, DV = D // H, 2 * D // H
device = "cuda" if torch.cuda.is_available() else "cpu"


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def theta_shift(x, sin, cos):
    return (x * cos) + (rotate_every_two(x) * sin)


class RetNetRelPos(nn.Module):
    def __init__(self):
        super().__init__()
        angle = 1.0 / (10000 ** torch.linspace(0, 1, DK // 2))
        self.register_buffer("angle", angle.unsqueeze(-1).repeat(1, 2).flatten())
        self.register_buffer("decay", torch.log(1 - 2 ** (-5 - torch.arange(H, dtype=torch.float))))

    def forward(self, slen, offset=0):
        index = torch.arange(offset, offset + slen, device=self.angle.device).to(self.decay)
        sin = torch.sin(index[:, None] * self.angle[None, :])
        cos = torch.cos(index[:, None] * self.angle[None, :])
        return sin, cos


class MultiScaleRetention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(D, D, bias=False)
        self.k_proj = nn.Linear(D, D, bias=False)
        self.v_proj = nn.Linear(D, 2 * D, bias=False)
        self.g_proj = nn.Linear(D, 2 * D, bias=False)
        self.out_proj = nn.Linear(2 * D, D, bias=False)
        self.group_norm = nn.GroupNorm(H, 2 * D, affine=False)

    def qkv(self, x, sin, cos):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, H, DK).transpose(1, 2)
        k = self.k_proj(x).view(b, t, H, DK).transpose(1, 2) * DK**-0.5
        v = self.v_proj(x).view(b, t, H, DV).transpose(1, 2)
        return theta_shift(q, sin, cos), theta_shift(k, sin, cos), v

    def finish(self, x, o):
        b, t = o.shape[0], o.shape[2]
        o = o.transpose(1, 2).reshape(b * t, 2 * D)
        o = self.group_norm(o).view(b, t, 2 * D)
        return self.out_proj(F.silu(self.g_proj(x)) * o)

    def chunkwise(self, x, sin, cos, decay, state=None):
        q, k, v = self.qkv(x, sin, cos)
        b, _, t, _ = q.shape
        c = min(CHUNK, t)
        idx = torch.arange(c, device=x.device)
        diff = (idx[:, None] - idx[None, :]).to(decay)
        mask = torch.exp(decay[:, None, None] * diff).masked_fill(diff < 0, 0.0)  # H, c, c
        mask = mask / mask.sum(dim=-1, keepdim=True).sqrt()
        query_decay = torch.exp(decay[:, None] * (idx + 1)).view(H, c, 1)
        key_decay = torch.exp(decay[:, None] * (c - 1 - idx)).view(H, c, 1)
        chunk_decay = torch.exp(decay * c).view(H, 1, 1)
        if state is None:
            state = q.new_zeros(b, H, DK, DV)
        outs = []
        for s in range(0, t, c):
            qc, kc, vc = q[:, :, s : s + c], k[:, :, s : s + c], v[:, :, s : s + c]
            inner = (qc @ kc.transpose(-1, -2) * mask) @ vc
            cross = (qc @ state) * query_decay
            outs.append(inner + cross)
            state = state * chunk_decay + (kc * key_decay).transpose(-1, -2) @ vc
        return self.finish(x, torch.cat(outs, dim=2)), state

    def recurrent(self, x, sin, cos, decay, state):
        q, k, v = self.qkv(x, sin, cos)
        state = state * torch.exp(decay).view(1, H, 1, 1) + k.transpose(-1, -2) @ v
        return self.finish(x, q @ state), state


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.retention = MultiScaleRetention()
        self.ffn = nn.Sequential(nn.Linear(D, FFN), nn.GELU(), nn.Linear(FFN, D))

    def forward(self, x, sin, cos, decay, state=None, recurrent=False):
        fn = self.retention.recurrent if recurrent else self.retention.chunkwise
        r, state = fn(self.ln1(x), sin, cos, decay, state)
        x = x + r
        return x + self.ffn(self.ln2(x)), state


class RetNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.relpos = RetNetRelPos()
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, ids, states=None, offset=0, recurrent=False):
        sin, cos = self.relpos(ids.shape[1], offset)
        x = self.embed(ids)
        new = []
        for i, layer in enumerate(self.layers):
            x, st = layer(x, sin, cos, self.relpos.decay, None if states is None else states[i], recurrent)
            new.append(st)
        return self.head(self.ln_f(x)), new


model = RetNet().to(device)
decay_params = [p for n, p in model.named_parameters() if p.dim() >= 2]
other_params = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.Adam(
    [{"params": decay_params, "weight_decay": 0.05}, {"params": other_params, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.98),
)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    ids = torch.randint(0, V, (B, T + 1), device=device)
    logits, _ = model(ids[:, :-1])
    loss = F.cross_entropy(logits.view(-1, V), ids[:, 1:].reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
    if device == "cuda" and step != 1:
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, loss, ids
model.eval()
with torch.no_grad():
    ids = torch.randint(0, V, (EVAL_B, EVAL_T + 1), device=device)
    logits, _ = model(ids[:, :-1])
    nll = F.cross_entropy(logits.view(-1, V), ids[:, 1:].reshape(-1)).item()
    del logits
if device == "cuda":
    print(
        f"eval nll {nll:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    prompt = torch.randint(0, V, (GEN_B, PROMPT), device=device)
    logits, states = model(prompt)
    tok = logits[:, -1:].argmax(dim=-1)
    out = [tok]
    for i in range(NEW - 1):
        logits, states = model(tok, states, offset=PROMPT + i, recurrent=True)
        tok = logits[:, -1:].argmax(dim=-1)
        out.append(tok)
    generated = torch.cat(out, dim=1).cpu()
if device == "cuda":
    print(
        f"generated {tuple(generated.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
