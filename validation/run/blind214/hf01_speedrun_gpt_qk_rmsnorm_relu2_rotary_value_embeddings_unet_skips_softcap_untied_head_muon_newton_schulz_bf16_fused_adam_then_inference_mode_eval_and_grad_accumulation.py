"""A modded-nanoGPT ("speedrun")-style GPT written by hand, trained with Muon and Adam.

Model: 12 blocks of d_model 768 with 6 heads of 128, vocabulary 50,304, context 1024. Embeddings in
bf16; every matrix of the blocks is an fp32 CastedLinear (weight cast to the input's dtype at each
forward, no autocast). Attention: fused qkv weight, QK-norm by F.rms_norm (no affine), rotary
embeddings by hand (half-truncated frequencies), value embeddings (three bf16 tables, used by the
first three and the last three blocks, mixed into v by learned lambdas), SDPA with is_causal. MLP
4x with ReLU squared. The residual stream mixes in the embedding x0 by learned per-block lambdas, and
the six first blocks' outputs are added to the six last blocks' inputs in reverse order (U-net skips
with learned weights). Untied fp32 lm_head whose logits are soft-capped as 15 * tanh(logits / 15),
cross entropy in fp32.

Optimizers: Muon by hand (SGD-momentum 0.95 with Nesterov, the update orthogonalized by 5
Newton-Schulz iterations in bf16, scaled by sqrt(max(1, rows / cols))) over the blocks' 2-D weights;
fused Adam (betas 0.8/0.95) over the embeddings, value embeddings, lm_head and scalars.

Phases: the first step; 3 more steps at batch 16; evaluation under inference_mode at batch 16; then
gradient accumulation: 2 steps of 4 micro-batches of 8 sequences, the loss divided by 4. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2141)
if SMALL:
    VOCAB, D, LAYERS, HEADS, CTX, BATCH = 512, 128, 4, 2, 64, 2
else:
    VOCAB, D, LAYERS, HEADS, CTX, BATCH = 50304, 768, 12, 6, 1024, 16
HD = D // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class CastedLinear(nn.Linear):
    def __init__(self, d_in, d_out):
        super().__init__(d_in, d_out, bias=False)

    def forward(self, x):
        return F.linear(x, self.weight.type_as(x))


class Rotary(nn.Module):
    def __init__(self, dim, max_len):
        super().__init__()
        freqs = (1 / 1024) ** torch.linspace(0, 1, steps=dim // 4, dtype=torch.float32)
        freqs = torch.cat([freqs, freqs.new_zeros(dim // 4)])
        theta = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)
        self.register_buffer("cos", theta.cos(), persistent=False)
        self.register_buffer("sin", theta.sin(), persistent=False)

    def forward(self, x):
        t = x.size(-3)
        cos, sin = self.cos[None, :t, None, :], self.sin[None, :t, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        y1 = x1 * cos + x2 * sin
        y2 = x1 * (-sin) + x2 * cos
        return torch.cat((y1, y2), dim=-1).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = CastedLinear(D, 3 * D)
        self.proj = CastedLinear(D, D)
        self.fc = CastedLinear(D, 4 * D)
        self.out = CastedLinear(4 * D, D)
        self.rotary = Rotary(HD, CTX)
        self.lambdas = nn.Parameter(torch.tensor([1.0, 0.0]))
        self.v_lambdas = nn.Parameter(torch.tensor([0.5, 0.5]))

    def forward(self, x, x0, ve):
        b, t, _ = x.shape
        x = self.lambdas[0] * x + self.lambdas[1] * x0
        h = F.rms_norm(x, (D,))
        q, k, v = self.qkv(h).view(b, t, 3, HEADS, HD).unbind(2)
        q, k = F.rms_norm(q, (HD,)), F.rms_norm(k, (HD,))
        q, k = self.rotary(q), self.rotary(k)
        if ve is not None:
            v = self.v_lambdas[0] * v + self.v_lambdas[1] * ve.view_as(v)
        else:
            v = self.v_lambdas[0] * v
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, scale=0.12
        )
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        h = F.rms_norm(x, (D,))
        return x + self.out(F.relu(self.fc(h)).square())


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.value_embeds = nn.ModuleList([nn.Embedding(VOCAB, D) for _ in range(3)])
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.skip_weights = nn.Parameter(torch.ones(LAYERS // 2))
        self.lm_head = CastedLinear(D, VOCAB)
        self.lm_head.weight.data.zero_()
        for blk in self.blocks:
            blk.proj.weight.data.zero_()
            blk.out.weight.data.zero_()

    def forward(self, idx, targets):
        ve = [e(idx) for e in self.value_embeds]
        half = LAYERS // 2
        ves = ve + [None] * (LAYERS - 6) + ve if LAYERS >= 6 else [ve[0]] + [None] * (LAYERS - 2) + [ve[1]]
        x = x0 = F.rms_norm(self.embed(idx), (D,))
        skips = []
        for i, blk in enumerate(self.blocks):
            if i >= half:
                x = x + self.skip_weights[i - half] * skips.pop()
            x = blk(x, x0, ves[i])
            if i < half:
                skips.append(x)
        x = F.rms_norm(x, (D,))
        logits = self.lm_head(x).float()
        logits = 15 * torch.tanh(logits / 15)
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


def zeropower_via_newtonschulz5(G, steps=5):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    if G.size(0) > G.size(1):
        X = X.T
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.05, momentum=0.95):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(g)
                buf = state["momentum_buffer"]
                buf.lerp_(g, 1 - group["momentum"])
                g = g.lerp(buf, group["momentum"])
                g = zeropower_via_newtonschulz5(g)
                scale = max(1, p.size(0) / p.size(1)) ** 0.5
                p.add_(g.view_as(p), alpha=-group["lr"] * scale)


model = GPT().to(device)
for m in (model.embed, *model.value_embeds):
    m.bfloat16()
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
hidden = [p for n, p in model.blocks.named_parameters() if p.ndim == 2]
scalars = [p for n, p in model.blocks.named_parameters() if p.ndim < 2] + [model.skip_weights]
embeds = [model.embed.weight] + [e.weight for e in model.value_embeds]
adam = torch.optim.Adam(
    [
        dict(params=embeds, lr=0.6),
        dict(params=[model.lm_head.weight], lr=0.008),
        dict(params=scalars, lr=0.04),
    ],
    betas=(0.8, 0.95),
    eps=1e-10,
    fused=device == "cuda",
)
muon = Muon(hidden, lr=0.05, momentum=0.95)
optimizers = [adam, muon]


def batch(n):
    idx = torch.randint(0, VOCAB, (n, CTX + 1), device=device)
    return idx[:, :-1], idx[:, 1:]


def train_step(micro=1, n=BATCH):
    total = 0.0
    for _ in range(micro):
        x, y = batch(n)
        loss = model(x, y) / micro
        loss.backward()
        total += loss.item()
    for opt in optimizers:
        opt.step()
    model.zero_grad(set_to_none=True)
    return total


model.train()
print(f"step 0 loss {train_step():.4f}")
report("first step")
for _ in range(3):
    loss = train_step()
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode():
    x, y = batch(BATCH)
    print(f"eval loss {model(x, y).item():.4f}")
report("eval")

model.train()
for step in range(2):
    loss = train_step(micro=4, n=BATCH // 2)
    print(f"accum step {step} loss {loss:.4f}")
report("accumulation")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
