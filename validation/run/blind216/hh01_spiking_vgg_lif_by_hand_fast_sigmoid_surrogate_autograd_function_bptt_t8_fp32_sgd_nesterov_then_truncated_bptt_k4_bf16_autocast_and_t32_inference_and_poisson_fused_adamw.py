"""A spiking VGG-11-like CNN written by hand: leaky integrate-and-fire (LIF) neurons unrolled over time,
the Heaviside spike with a fast-sigmoid surrogate gradient (Zenke & Ganguli's SuperSpike) as a custom
torch.autograd.Function, soft reset by subtraction with the reset detached (as snntorch does), and
backpropagation through time.

Tiny-ImageNet-sized random images (3 x 64 x 64, 200 classes), direct encoding: the first conv + BN is
computed once and fed as current at every time step; every later conv/BN runs per step. The readout is a
non-spiking leaky integrator whose mean membrane over time is the logit. Cross-entropy on the logits.

Phases: 3 steps of full BPTT over T = 8 in fp32 with SGD momentum nesterov at batch 64; 2 steps of
truncated BPTT over T = 16 with windows of k = 4 (a loss and backward per window, the membranes detached
between windows, gradients accumulated, one SGD step) under bf16 autocast; evaluation under
inference_mode over T = 32 at batch 256 (spike rates per layer); then the optimizer dropped,
empty_cache(), and 3 steps with Poisson (Bernoulli) rate-coded input spikes at T = 8 with fused AdamW.
4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2161)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, RES, CLASSES = (4, 8, 32, 200) if SMALL else (64, 256, 64, 200)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class FastSigmoidSpike(torch.autograd.Function):
    """Heaviside forward; d spike / d v = 1 / (slope * |v| + 1)^2 backward."""

    @staticmethod
    def forward(ctx, v, slope):
        ctx.save_for_backward(v)
        ctx.slope = slope
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx, grad):
        (v,) = ctx.saved_tensors
        return grad / (ctx.slope * v.abs() + 1.0) ** 2, None


spike = FastSigmoidSpike.apply


class LIF(nn.Module):
    def __init__(self, beta=0.9, threshold=1.0, slope=25.0):
        super().__init__()
        self.beta, self.threshold, self.slope = beta, threshold, slope

    def forward(self, current, mem):
        mem = self.beta * mem + current if mem is not None else current
        spk = spike(mem - self.threshold, self.slope)
        mem = mem - spk.detach() * self.threshold
        return spk, mem


CFG = [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"]


class SpikingVGG(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, CFG[0], 3, padding=1, bias=False), nn.BatchNorm2d(CFG[0]))
        self.stem_lif = LIF()
        self.blocks = nn.ModuleList()
        self.lifs = nn.ModuleList()
        self.pool_after = []
        c = CFG[0]
        for v in CFG[2:]:  # CFG[1] is "M": pool right after the stem
            if v == "M":
                self.pool_after[-1] = True
                continue
            self.blocks.append(nn.Sequential(nn.Conv2d(c, v, 3, padding=1, bias=False), nn.BatchNorm2d(v)))
            self.lifs.append(LIF())
            self.pool_after.append(False)
            c = v
        self.fc1 = nn.Linear(512 * (RES // 32) ** 2, 1024)
        self.fc1_lif = LIF()
        self.readout = nn.Linear(1024, CLASSES)
        self.readout_beta = 0.95

    def init_state(self):
        return {"stem": None, "fc1": None, "out": None, **{i: None for i in range(len(self.blocks))}}

    def step(self, stem_current, state, rates=None):
        spk, state["stem"] = self.stem_lif(stem_current, state["stem"])
        x = F.max_pool2d(spk, 2)
        for i, (block, lif) in enumerate(zip(self.blocks, self.lifs)):
            spk, state[i] = lif(block(x), state[i])
            if rates is not None:
                rates[i] += spk.mean()
            x = F.max_pool2d(spk, 2) if self.pool_after[i] else spk
        spk, state["fc1"] = self.fc1_lif(self.fc1(x.flatten(1)), state["fc1"])
        cur = self.readout(spk)
        state["out"] = cur if state["out"] is None else self.readout_beta * state["out"] + cur
        return state["out"]

    def forward(self, x, steps, poisson=False, rates=None):
        state = self.init_state()
        stem_current = None if poisson else self.stem(x)
        total = 0
        for _ in range(steps):
            cur = self.stem(torch.bernoulli(x)) if poisson else stem_current
            total = total + self.step(cur, state, rates)
        return total / steps


model = SpikingVGG().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)


def batch(n):
    return torch.randn(n, 3, RES, RES, device=device), torch.randint(0, CLASSES, (n,), device=device)


# full BPTT, T = 8, fp32
for it in range(3):
    x, y = batch(BATCH)
    loss = F.cross_entropy(model(x, 8), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"bptt T=8 loss {loss.item():.4f}")
report("bptt fp32")

# truncated BPTT, T = 16 in windows of 4, bf16 autocast
T, K = 16, 4
for it in range(2):
    x, y = batch(BATCH)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        state = model.init_state()
        stem_current = model.stem(x)
        for w in range(T // K):
            total = 0
            for _ in range(K):
                total = total + model.step(stem_current, state)
            loss = F.cross_entropy(total / K, y) / (T // K)
            loss.backward(retain_graph=w < T // K - 1)
            state = {k: (v.detach() if v is not None else None) for k, v in state.items()}
    opt.step()
print(f"truncated bptt loss {loss.item():.4f}")
report("truncated bptt bf16")

# evaluation, T = 32
model.eval()
with torch.inference_mode():
    x, y = batch(EVAL_BATCH)
    rates = [torch.zeros((), device=device) for _ in model.blocks]
    logits = model(x, 32, rates=rates)
    acc = (logits.argmax(1) == y).float().mean().item()
print(f"eval acc {acc:.4f} rates {[round(r.item() / 32, 3) for r in rates]}")
report("eval T=32")

# Poisson rate coding with fused AdamW
model.train()
del opt
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=device == "cuda")
for it in range(3):
    x, y = batch(BATCH)
    x = torch.sigmoid(x)
    loss = F.cross_entropy(model(x, 8, poisson=True), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"poisson loss {loss.item():.4f}")
report("poisson fused adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
