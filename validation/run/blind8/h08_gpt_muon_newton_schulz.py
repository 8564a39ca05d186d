"""A hand-written GPT (1024 wide, 12 layers, SDPA is_causal, ReLU^2 MLP, untied head, 50304 vocab) in bf16
weights trained with a hand-written Muon optimizer for the 2-D hidden matrices (momentum buffers,
Nesterov, five Newton-Schulz iterations in bf16 on each update) and AdamW(fused=True) for embeddings and
head; batch 8 x 1024 tokens, 3 steps."""

import os

import torch
from torch import nn
from torch.nn import functional as F

SMALL = bool(os.environ.get("SMOKE"))
WIDTH, LAYERS, VOCAB, BATCH, SEQ = (64, 1, 1000, 2, 32) if SMALL else (1024, 12, 50304, 8, 1024)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(808)


def newton_schulz(g, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.bfloat16()
    transposed = x.size(0) > x.size(1)
    if transposed:
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        m = x @ x.T
        x = a * x + (b * m + c * m @ m) @ x
    return x.T if transposed else x


class Muon(torch.optim.Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "buf" not in state:
                    state["buf"] = torch.zeros_like(p.grad)
                buf = state["buf"]
                buf.lerp_(p.grad, 1 - group["momentum"])
                update = newton_schulz(p.grad.lerp(buf, group["momentum"]))
                p.add_(update.to(p.dtype), alpha=-group["lr"] * max(1, p.size(0) / p.size(1)) ** 0.5)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.proj = nn.Linear(WIDTH, WIDTH, bias=False)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.out = nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(F.rms_norm(x, (c,))).view(b, t, 3, 16, c // 16).transpose(1, 3).unbind(2)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.relu(self.fc(F.rms_norm(x, (c,)))).square())


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx):
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(F.rms_norm(x, (WIDTH,)))


model = GPT().to(device=device, dtype=torch.bfloat16)
hidden = [p for n, p in model.named_parameters() if "blocks" in n]
other = [p for n, p in model.named_parameters() if "blocks" not in n]
optimizers = [Muon(hidden), torch.optim.AdamW(other, lr=3e-4, fused=device == "cuda")]
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    idx = torch.randint(0, VOCAB, (BATCH, SEQ + 1), device=device)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), idx[:, 1:].reshape(-1))
    loss.backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
