"""A GPT trained with Muon as Keller Jordan's modded-nanogpt / `muon` package writes it: the model by
hand (12 layers, width 768, 6 heads of 128 with RMS-normed queries and keys and rotary embeddings,
squared-ReLU MLP of 3,072, untied 50,304-token embedding and head, RMS norms without weights; fp32
weights under bf16 autocast, SDPA causal), the optimizer `SingleDeviceMuonWithAuxAdam`-style: every
2-D hidden matrix on Muon (Nesterov momentum 0.95 by lerp_, then `zeropower_via_newtonschulz5`: the
update cast to bf16, transposed when tall, normalised by its Frobenius norm, 5 quintic
Newton-Schulz iterations X <- aX + (bA + cA^2)X with A = XX^T, scaled by sqrt(max(1, rows/cols)),
lr 0.02, weight decay 0), the embedding, head and nothing else on AdamW (betas 0.8/0.95, lr 0.008
and 0.004); batch 16 x 1,024 seeded tokens, 5 steps, the first its own phase; then a no_grad eval of
4 batches; then the optimizer's state_dict saved to CPU, the Muon momenta zeroed and reloaded (a
restart as users write it) and 2 more steps. Phases: step 0, steps 1-4, eval, reload and 2 steps; 4
phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17202)
if SMALL:
    V, L, D, H, T, B, STEPS = 512, 2, 64, 2, 64, 2, 3
else:
    V, L, D, H, T, B, STEPS = 50304, 12, 768, 6, 1024, 16, 5
HD = D // H
device = "cuda" if torch.cuda.is_available() else "cpu"


def norm(x):
    return F.rms_norm(x, (x.size(-1),))


class Rotary(nn.Module):
    def __init__(self, dim, max_seq_len):
        super().__init__()
        freqs = (1 / 1024) ** torch.linspace(0, 1, steps=dim // 4, dtype=torch.float32)
        freqs = torch.cat([freqs, freqs.new_zeros(dim // 4)])
        theta = torch.einsum("i,j -> ij", torch.arange(max_seq_len, dtype=torch.float32), freqs)
        self.register_buffer("cos", theta.cos(), persistent=False)
        self.register_buffer("sin", theta.sin(), persistent=False)

    def forward(self, x):
        cos, sin = self.cos[None, : x.size(-3), None, :], self.sin[None, : x.size(-3), None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        y1 = x1 * cos + x2 * sin
        y2 = x1 * (-sin) + x2 * cos
        return torch.cat((y1, y2), 3).type_as(x)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.rotary = Rotary(HD, T)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, H, HD).unbind(2)
        q, k = norm(q), norm(k)
        q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, D))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(D, 4 * D, bias=False)
        self.proj = nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        return self.proj(F.relu(self.fc(x)).square())


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(norm(x))
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, targets):
        x = norm(self.embed(idx))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(norm(x)).float()
        logits = 30 * torch.sigmoid(logits / 7.5)
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


def zeropower_via_newtonschulz5(G, steps=5):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B_ = b * A + c * A @ A
        X = a * X + B_ @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update(grad, momentum, beta=0.95, ns_steps=5, nesterov=True):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    update = zeropower_via_newtonschulz5(update, steps=ns_steps)
    update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
    return update


def adam_update(grad, buf1, buf2, step, betas, eps):
    buf1.lerp_(grad, 1 - betas[0])
    buf2.lerp_(grad.square(), 1 - betas[1])
    buf1c = buf1 / (1 - betas[0] ** step)
    buf2c = buf2 / (1 - betas[1] ** step)
    return buf1c / (buf2c.sqrt() + eps)


class SingleDeviceMuonWithAuxAdam(torch.optim.Optimizer):
    def __init__(self, param_groups):
        for group in param_groups:
            if group["use_muon"]:
                group.setdefault("lr", 0.02)
                group.setdefault("momentum", 0.95)
                group.setdefault("weight_decay", 0)
            else:
                group.setdefault("betas", (0.9, 0.95))
                group.setdefault("eps", 1e-10)
                group.setdefault("weight_decay", 0)
        super().__init__(param_groups, dict())

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            if group["use_muon"]:
                for p in group["params"]:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    state = self.state[p]
                    if len(state) == 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update.reshape(p.shape), alpha=-group["lr"])
            else:
                for p in group["params"]:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    state = self.state[p]
                    if len(state) == 0:
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                        state["step"] = 0
                    state["step"] += 1
                    update = adam_update(
                        p.grad,
                        state["exp_avg"],
                        state["exp_avg_sq"],
                        state["step"],
                        group["betas"],
                        group["eps"],
                    )
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update, alpha=-group["lr"])


model = GPT().to(device)
hidden = [p for p in model.blocks.parameters() if p.ndim >= 2]
opt = SingleDeviceMuonWithAuxAdam(
    [
        dict(params=hidden, use_muon=True, lr=0.02, weight_decay=0.0),
        dict(params=[model.embed.weight], use_muon=False, lr=0.008, betas=(0.8, 0.95)),
        dict(params=[model.head.weight], use_muon=False, lr=0.004, betas=(0.8, 0.95)),
    ]
)
gen = torch.Generator().manual_seed(17202)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch():
    tok = torch.randint(0, V, (B, T + 1), generator=gen).to(device)
    return tok[:, :-1], tok[:, 1:]


def train_step():
    x, y = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(x, y)
    loss.backward()
    opt.step()
    model.zero_grad(set_to_none=True)
    return loss


model.train()
for step in range(STEPS):
    loss = train_step()
    print(f"step {step} loss {loss.item():.4f}")
    if device == "cuda" and step == 0:
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    val = sum(model(*batch()).item() for _ in range(4)) / 4
print(f"val loss {val:.4f}")
if device == "cuda":
    torch.cuda.reset_peak_memory_stats()

saved = {k: v for k, v in opt.state_dict().items()}
saved["state"] = {
    i: {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in s.items()} for i, s in saved["state"].items()
}
for p in hidden:
    opt.state[p]["momentum_buffer"].zero_()
opt.load_state_dict(saved)
model.train()
for step in range(2):
    loss = train_step()
    print(f"resumed step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.max_memory_reserved()}")
