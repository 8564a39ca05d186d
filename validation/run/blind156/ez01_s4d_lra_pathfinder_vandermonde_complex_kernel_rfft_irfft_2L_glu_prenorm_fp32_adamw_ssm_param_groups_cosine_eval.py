"""An S4D classifier for long sequences as the state-spaces repository's example.py and
models/s4/s4d.py write it: Pathfinder-style 64 x 64 grayscale images read as sequences of 4,096
pixels, a linear encoder to 256 channels, 6 pre-norm S4D layers (S4D-Lin initialisation: complex
diagonal A = -1/2 + i*pi*n over 32 conjugate pairs, a learned log step size, C stored as
view_as_real), each layer's convolution kernel computed by a Vandermonde product (a complex einsum
over exp(dtA * arange(L))), the long convolution by torch.fft.rfft/irfft over n = 2L with a
complex multiply, a skip term D, GELU, Dropout1d and a 1 x 1 Conv1d to 2H with GLU; mean pooling
and a linear head over 10 classes. fp32, AdamW with the repository's parameter groups (the SSM's
log_dt, log_A_real and A_imag at lr 1e-3 without weight decay, the rest, C included, at 4e-3
with 0.05), cosine schedule, batch 24, 3 steps (each its own phase), then evaluation at batch 64
under no_grad over two batches; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15601)
if SMALL:
    H, N, LAYERS, SIDE, B, EVAL_B, STEPS = 16, 8, 2, 8, 2, 4, 3
else:
    H, N, LAYERS, SIDE, B, EVAL_B, STEPS = 256, 64, 6, 64, 24, 64, 3
L = SIDE * SIDE
CLASSES = 10
device = "cuda" if torch.cuda.is_available() else "cpu"


class S4DKernel(nn.Module):
    """Generate the convolution kernel from the diagonal SSM parameters."""

    def __init__(self, d_model, N=64, dt_min=0.001, dt_max=0.1, lr=None):
        super().__init__()
        h = d_model
        log_dt = torch.rand(h) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        C = torch.randn(h, N // 2, dtype=torch.cfloat)
        self.C = nn.Parameter(torch.view_as_real(C))
        self.register("log_dt", log_dt, lr)
        log_A_real = torch.log(0.5 * torch.ones(h, N // 2))
        A_imag = math.pi * torch.arange(N // 2).float().repeat(h, 1)
        self.register("log_A_real", log_A_real, lr)
        self.register("A_imag", A_imag, lr)

    def forward(self, L):
        dt = torch.exp(self.log_dt)  # (H)
        C = torch.view_as_complex(self.C)  # (H N)
        A = -torch.exp(self.log_A_real) + 1j * self.A_imag  # (H N)
        dtA = A * dt.unsqueeze(-1)  # (H N)
        K = dtA.unsqueeze(-1) * torch.arange(L, device=A.device)  # (H N L)
        C = C * (torch.exp(dtA) - 1.0) / A
        K = 2 * torch.einsum("hn, hnl -> hl", C, torch.exp(K)).real
        return K

    def register(self, name, tensor, lr=None):
        if lr == 0.0:
            self.register_buffer(name, tensor)
        else:
            self.register_parameter(name, nn.Parameter(tensor))
            optim = {"weight_decay": 0.0}
            if lr is not None:
                optim["lr"] = lr
            setattr(getattr(self, name), "_optim", optim)


class S4D(nn.Module):
    def __init__(self, d_model, d_state=64, dropout=0.0, **kernel_args):
        super().__init__()
        self.h = d_model
        self.n = d_state
        self.D = nn.Parameter(torch.randn(self.h))
        self.kernel = S4DKernel(self.h, N=self.n, **kernel_args)
        self.activation = nn.GELU()
        self.dropout = nn.Dropout1d(dropout) if dropout > 0.0 else nn.Identity()
        self.output_linear = nn.Sequential(nn.Conv1d(self.h, 2 * self.h, kernel_size=1), nn.GLU(dim=-2))

    def forward(self, u):  # (B H L)
        L = u.size(-1)
        k = self.kernel(L=L)  # (H L)
        k_f = torch.fft.rfft(k, n=2 * L)  # (H L+1)
        u_f = torch.fft.rfft(u, n=2 * L)  # (B H L+1)
        y = torch.fft.irfft(u_f * k_f, n=2 * L)[..., :L]  # (B H L)
        y = y + u * self.D.unsqueeze(-1)
        y = self.dropout(self.activation(y))
        return self.output_linear(y)


class S4Model(nn.Module):
    def __init__(self, d_input, d_output, d_model, n_layers, dropout=0.1):
        super().__init__()
        self.encoder = nn.Linear(d_input, d_model)
        self.s4_layers = nn.ModuleList()
        self.norms = nn.ModuleList()
        self.dropouts = nn.ModuleList()
        for _ in range(n_layers):
            self.s4_layers.append(S4D(d_model, d_state=N, dropout=dropout, lr=1e-3))
            self.norms.append(nn.LayerNorm(d_model))
            self.dropouts.append(nn.Dropout1d(dropout))
        self.decoder = nn.Linear(d_model, d_output)

    def forward(self, x):  # (B L d_input)
        x = self.encoder(x)
        x = x.transpose(-1, -2)  # (B H L)
        for layer, norm, dropout in zip(self.s4_layers, self.norms, self.dropouts):
            z = norm(x.transpose(-1, -2)).transpose(-1, -2)  # pre-norm
            z = layer(z)
            z = dropout(z)
            x = z + x
        x = x.transpose(-1, -2).mean(dim=1)
        return self.decoder(x)


def setup_optimizer(model, lr, weight_decay, epochs):
    all_parameters = list(model.parameters())
    params = [p for p in all_parameters if not hasattr(p, "_optim")]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    hps = [getattr(p, "_optim") for p in all_parameters if hasattr(p, "_optim")]
    hps = [dict(s) for s in sorted(list(dict.fromkeys(frozenset(hp.items()) for hp in hps)))]
    for hp in hps:
        group = [p for p in all_parameters if getattr(p, "_optim", None) == hp]
        optimizer.add_param_group({"params": group, **hp})
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, epochs)
    return optimizer, scheduler


model = S4Model(1, CLASSES, H, LAYERS).to(device)
optimizer, scheduler = setup_optimizer(model, lr=4e-3, weight_decay=0.05, epochs=100)
images = torch.rand(B * STEPS, SIDE, SIDE, device=device)
labels = torch.randint(0, CLASSES, (B * STEPS,), device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = images[step * B : (step + 1) * B].view(B, L, 1)
    y = labels[step * B : (step + 1) * B]
    optimizer.zero_grad()
    out = model(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, loss, x
model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x = torch.rand(EVAL_B, L, 1, device=device)
        y = torch.randint(0, CLASSES, (EVAL_B,), device=device)
        pred = model(x).argmax(dim=-1)
        correct += (pred == y).sum().item()
if device == "cuda":
    print(
        f"eval correct {correct} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
