"""Equilibrium propagation (Scellier & Bengio 2017) for a convolutional Hopfield-like network, as in
Laborieux et al. 2021 ("Scaling equilibrium propagation to deep ConvNets"), with the allocator's
expandable segments set at the top.

The network's primitive function Phi(x, s) = sum_l s_{l+1} . maxpool(conv_l(s_l)) + s_out . fc(s_L) over
four 3x3 conv layers (3 -> 128 -> 256 -> 512 -> 512, each pooled 2x2: 32 -> 16 -> 8 -> 4 -> 2) and a
readout of 10 units; the states relax by s <- sigma(dPhi/ds) (sigma a steep sigmoid), dPhi/ds taken by
torch.autograd.grad over states that are leaf tensors with requires_grad. The free phase relaxes from
zero; two nudged phases (beta = +0.5 and -0.5, the MSE to the one-hot target subtracted from Phi) start
from the free fixed point; the weights follow -(dPhi/dW(s+) - dPhi/dW(s-)) / (2 beta), taken by
backward of the difference of Phi at the two detached fixed points. Random CIFAR-sized images, 10 classes.

Phases: 2 EP steps at batch 512 (free 20 iterations, nudged 8 each) with SGD momentum, fp32; the free
phase alone at batch 1024 to predict (argmax of the readout state); 2 EP steps under bf16 autocast with
foreach AdamW; then empty_cache() and 2 steps of the BPTT baseline (Ernoult et al. 2019): 12 free
iterations with create_graph=True and the loss back-propagated through them (double backward of the
convolutions and max pooling), batch 128, SGD. 4 phases."""

import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2166)
device = "cuda" if torch.cuda.is_available() else "cpu"
CHANS = [3, 16, 32, 32, 32] if SMALL else [3, 128, 256, 512, 512]
BATCH, EVAL_BATCH, BPTT_BATCH = (8, 16, 4) if SMALL else (512, 1024, 128)
CLASSES, BETA = 10, 0.5


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class EPNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(CHANS[:-1], CHANS[1:]))
        self.fc = nn.Linear(CHANS[-1] * 2 * 2, CLASSES)

    def init_states(self, n):
        sizes = [(n, c, 32 >> (i + 1), 32 >> (i + 1)) for i, c in enumerate(CHANS[1:])] + [(n, CLASSES)]
        return [torch.zeros(s, device=device, requires_grad=True) for s in sizes]

    def phi(self, x, states, beta=0.0, target=None):
        inputs = [x] + states[:-2]
        total = 0
        for conv, s_in, s_out in zip(self.convs, inputs, states[:-1]):
            total = total + (s_out * F.max_pool2d(conv(s_in), 2)).sum()
        total = total + (states[-1] * self.fc(states[-2].flatten(1))).sum()
        if beta:
            total = total - beta * 0.5 * (states[-1].float() - target).square().sum()
        return total


def sigma(v):
    return torch.sigmoid(4 * (v - 0.5))


def relax(model, x, states, steps, beta=0.0, target=None, create_graph=False):
    for _ in range(steps):
        p = model.phi(x, states, beta, target)
        grads = torch.autograd.grad(p, states, create_graph=create_graph)
        states = [sigma(g) for g in grads]
        if not create_graph:
            states = [s.detach().float().requires_grad_() for s in states]
    return states


def ep_step(model, opt, x, y, autocast=False):
    target = F.one_hot(y, CLASSES).float()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
        free = relax(model, x, model.init_states(x.shape[0]), 20)
        fixed = [s.detach() for s in free]
        plus = relax(model, x, [s.clone().requires_grad_() for s in fixed], 8, BETA, target)
        minus = relax(model, x, [s.clone().requires_grad_() for s in fixed], 8, -BETA, target)
        plus, minus = [s.detach() for s in plus], [s.detach() for s in minus]
        loss = -(model.phi(x, plus) - model.phi(x, minus)) / (2 * BETA * x.shape[0])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return F.mse_loss(fixed[-1], target).item()


def batch(n):
    return torch.randn(n, 3, 32, 32, device=device), torch.randint(0, CLASSES, (n,), device=device)


model = EPNet().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
for it in range(2):
    mse = ep_step(model, opt, *batch(BATCH))
print(f"ep free-phase mse {mse:.4f}")
report("ep fp32 sgd")

x, y = batch(EVAL_BATCH)
free = relax(model, x, model.init_states(EVAL_BATCH), 20)
acc = (free[-1].argmax(1) == y).float().mean().item()
del free
print(f"eval acc {acc:.4f}")
report("free phase eval")

opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
for it in range(2):
    mse = ep_step(model, opt, *batch(BATCH), autocast=True)
print(f"ep bf16 mse {mse:.4f}")
report("ep bf16 foreach adamw")

del opt
if device == "cuda":
    torch.cuda.empty_cache()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
for it in range(2):
    x, y = batch(BPTT_BATCH)
    states = relax(model, x, model.init_states(BPTT_BATCH), 12, create_graph=True)
    loss = F.mse_loss(states[-1], F.one_hot(y, CLASSES).float())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del states
print(f"bptt loss {loss.item():.4f}")
report("bptt create_graph")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
