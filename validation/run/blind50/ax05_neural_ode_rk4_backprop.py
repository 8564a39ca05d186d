"""A neural ODE integrated by a fixed-step RK4 solver written by hand (20 steps, 80 evaluations
of an MLP dynamics f(t, h) with the time concatenated), backpropagated through every solver step;
width 1024, hidden 2048, batch 512, fp32, Adam, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5005)
D, H, B, STEPS = (16, 32, 4, 3) if SMALL else (1024, 2048, 512, 20)
device = "cuda" if torch.cuda.is_available() else "cpu"


class Dynamics(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D + 1, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(), nn.Linear(H, D))

    def forward(self, t, h):
        return self.net(torch.cat([h, t.expand(h.shape[0], 1)], 1))


f = Dynamics().to(device)
enc, dec = nn.Linear(784, D).to(device), nn.Linear(D, 10).to(device)
params = [*f.parameters(), *enc.parameters(), *dec.parameters()]
optimizer = torch.optim.Adam(params, lr=1e-3)
dt = 1.0 / STEPS
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    x = torch.randn(B, 784, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    h = enc(x)
    t = torch.zeros(1, 1, device=device)
    for _ in range(STEPS):
        k1 = f(t, h)
        k2 = f(t + dt / 2, h + dt / 2 * k1)
        k3 = f(t + dt / 2, h + dt / 2 * k2)
        k4 = f(t + dt, h + dt * k3)
        h = h + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + dt
    loss = F.cross_entropy(dec(h), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del x, y, h, t, k1, k2, k3, k4, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
