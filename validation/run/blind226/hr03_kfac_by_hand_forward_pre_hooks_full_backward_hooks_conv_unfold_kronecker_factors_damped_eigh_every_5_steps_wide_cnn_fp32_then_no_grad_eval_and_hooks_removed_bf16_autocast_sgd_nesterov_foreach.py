"""K-FAC (Martens & Grosse 2015; Grosse & Martens 2016 for convolutions) written by hand over a wide
CIFAR-style CNN: register_forward_pre_hook saves each Conv2d/Linear input, register_full_backward_hook
saves its grad_output; every step the Kronecker factors are updated as running averages,
A = E[a a^T] over F.unfold patches (with a ones column for the bias) and G = E[g g^T] over the
spatial positions of grad_output. Every 5 steps the damped factors are eigendecomposed by
torch.linalg.eigh and the gradient (weight and bias as one matrix) is preconditioned in the
eigenbasis: Q_G^T grad Q_A / (d_G d_A^T + damping), mapped back; SGD momentum on the natural gradient with
a KL-clip scale nu = min(1, sqrt(kl_clip / sum(grad * nat_grad * lr^2))).

CNN: 3 -> 128 -> 128 (pool) -> 256 -> 256 (pool) -> 512 -> 512 (pool) -> Linear(512 * 16, 10) with
BatchNorm and ReLU, batch 256 at 32 x 32. Phases: 10 K-FAC steps in fp32 (TF32 allowed for matmul and
cuDNN); no_grad evaluation at batch 1024; hooks removed, 5 steps of SGD nesterov (foreach) under bf16
autocast at batch 512. 3 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2263)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def cbr(cin, cout):
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]


model = nn.Sequential(
    *cbr(3, 128), *cbr(128, 128), nn.MaxPool2d(2),
    *cbr(128, 256), *cbr(256, 256), nn.MaxPool2d(2),
    *cbr(256, 512), *cbr(512, 512), nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(512 * 16, 10),
).to(device)


class KFAC:
    def __init__(self, model, lr=0.05, momentum=0.9, damping=1e-3, stat_decay=0.95, kl_clip=1e-3, inv_every=5):
        self.lr, self.momentum, self.damping = lr, momentum, damping
        self.stat_decay, self.kl_clip, self.inv_every = stat_decay, kl_clip, inv_every
        self.mods = [m for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
        self.a, self.g, self.A, self.G, self.QA, self.QG, self.dA, self.dG = ({} for _ in range(8))
        self.buf = {}
        self.handles = []
        self.steps = 0
        for m in self.mods:
            self.handles.append(m.register_forward_pre_hook(self._save_input))
            self.handles.append(m.register_full_backward_hook(self._save_grad))

    def _save_input(self, m, inp):
        if torch.is_grad_enabled():
            self.a[m] = inp[0].detach()

    def _save_grad(self, m, gin, gout):
        self.g[m] = gout[0].detach()

    @torch.no_grad()
    def _factors(self, m):
        a, g = self.a.pop(m), self.g.pop(m)
        n = a.shape[0]
        if isinstance(m, nn.Conv2d):
            a = F.unfold(a, m.kernel_size, padding=m.padding, stride=m.stride)  # [n, cin*k*k, L]
            a = a.transpose(1, 2).reshape(-1, a.shape[1])
            g = g.permute(0, 2, 3, 1).reshape(-1, g.shape[1])
        a = torch.cat([a, a.new_ones(a.shape[0], 1)], 1)
        A = a.t() @ (a / a.shape[0])
        G = g.t() @ (g * (n / g.shape[0]))
        if m not in self.A:
            self.A[m], self.G[m] = A, G
        else:
            self.A[m].mul_(self.stat_decay).add_(A, alpha=1 - self.stat_decay)
            self.G[m].mul_(self.stat_decay).add_(G, alpha=1 - self.stat_decay)

    @torch.no_grad()
    def step(self):
        for m in self.mods:
            self._factors(m)
        if self.steps % self.inv_every == 0:
            for m in self.mods:
                self.dA[m], self.QA[m] = torch.linalg.eigh(self.A[m])
                self.dG[m], self.QG[m] = torch.linalg.eigh(self.G[m])
                self.dA[m].clamp_(min=0)
                self.dG[m].clamp_(min=0)
        nat = {}
        vg_sum = 0.0
        for m in self.mods:
            grad = torch.cat([m.weight.grad.flatten(1), m.bias.grad[:, None]], 1)
            v1 = self.QG[m].t() @ grad @ self.QA[m]
            v2 = v1 / (self.dG[m][:, None] * self.dA[m][None, :] + self.damping)
            v = self.QG[m] @ v2 @ self.QA[m].t()
            nat[m] = v
            vg_sum = vg_sum + (v * grad).sum() * self.lr**2
        nu = torch.clamp(torch.sqrt(self.kl_clip / vg_sum), max=1.0)
        for m in self.mods:
            v = nat[m] * nu
            for p, d in ((m.weight, v[:, :-1].view_as(m.weight)), (m.bias, v[:, -1])):
                if p not in self.buf:
                    self.buf[p] = d.clone()
                else:
                    self.buf[p].mul_(self.momentum).add_(d)
                p.add_(self.buf[p], alpha=-self.lr)
        self.steps += 1

    def remove(self):
        for h in self.handles:
            h.remove()


kfac = KFAC(model)
B = 256
for step in range(10):
    x = torch.randn(B, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    kfac.step()
    model.zero_grad(set_to_none=True)
    print(f"kfac step {step} loss {loss.item():.4f} mem {torch.cuda.memory_allocated()}")
report("kfac train")

model.eval()
with torch.no_grad():
    x = torch.randn(1024, 3, 32, 32, device=device)
    acc = (model(x).argmax(-1) == torch.randint(0, 10, (1024,), device=device)).float().mean()
print(f"eval acc {acc.item():.4f}")
report("eval")

# Phase 3: K-FAC off (hooks and factors dropped), SGD nesterov foreach under bf16 autocast.
kfac.remove()
del kfac
model.train()
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4, foreach=True)
for step in range(5):
    x = torch.randn(512, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (512,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"sgd step {step} loss {loss.item():.4f}")
report("sgd train")
