"""A hand-written GPT (8 layers, 768 wide, 12 heads, vocabulary 50,304, learned positions, SDPA
causal attention, tied LM head) trained with a hand-written Sophia-G optimizer (clipped
preconditioned momentum; Gauss-Newton-Bartlett diagonal Hessian estimate) under bf16 autocast: every
other step, after the optimizer step, labels are sampled from the model's own logits
(torch.distributions.Categorical on the GPU), their cross entropy is back-propagated and the squared
gradients update the Hessian EMA; batch 8 x 512, 4 steps; then a no_grad eval loss; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10304)
V, L, D, H, S, B = (256, 2, 64, 4, 32, 2) if SMALL else (50304, 8, 768, 12, 512, 8)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(S, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


class SophiaG(torch.optim.Optimizer):
    def __init__(self, params, lr=6e-4, betas=(0.965, 0.99), rho=0.04, weight_decay=0.1):
        super().__init__(params, dict(lr=lr, betas=betas, rho=rho, weight_decay=weight_decay))

    @torch.no_grad()
    def update_hessian(self):
        for group in self.param_groups:
            beta2 = group["betas"][1]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "hessian" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["hessian"] = torch.zeros_like(p)
                state["hessian"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)

    @torch.no_grad()
    def step(self, bs):
        for group in self.param_groups:
            beta1 = group["betas"][0]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "hessian" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                    state["hessian"] = torch.zeros_like(p)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                m = state["exp_avg"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                ratio = (m.abs() / (group["rho"] * bs * state["hessian"] + 1e-15)).clamp(None, 1)
                p.addcmul_(m.sign(), ratio, value=-group["lr"])


model = GPT().to(device)
for name, p in model.named_parameters():
    if name.endswith("out.weight") or name.endswith("proj.weight"):
        nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))
optimizer = SophiaG(model.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    idx = torch.randint(0, V, (B, S + 1), device=device)
    x, y = idx[:, :-1], idx[:, 1:]
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step(bs=B * S)
    optimizer.zero_grad(set_to_none=True)
    del logits
    if step % 2 == 0:
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(x)
            y_sample = torch.distributions.Categorical(logits=logits.float()).sample()
            loss_sampled = F.cross_entropy(logits.float().view(-1, V), y_sample.view(-1))
        loss_sampled.backward()
        optimizer.update_hessian()
        optimizer.zero_grad(set_to_none=True)
        del logits, y_sample, loss_sampled
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    idx = torch.randint(0, V, (B, S + 1), device=device)
    eval_loss = F.cross_entropy(model(idx[:, :-1]).float().view(-1, V), idx[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"eval {eval_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
