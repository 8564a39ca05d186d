"""The seed experiments of the memory-estimation literature (shared/truth/seeds_probe.py) as one plain
script: (x+1)*(2y) with/without grad, a fused autograd.Function, sigmoid by hand vs nn.Sigmoid, a 5-layer
MLP step by step, notebook-style kept outputs of Linear/MultiheadAttention/TransformerEncoderLayer, a
large 5*x backward, tensor deletion + empty_cache, and 3 AdamW iterations of an encoder layer. Every
step ends with mark(): print the figures and reset the peak."""

import gc
import os

import torch
import torch.nn as nn

SCALE = 64 if os.environ.get("SMOKE") else 1  # divides every size
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
torch.manual_seed(0)


def mark(label):
    if cuda:
        print(
            f"{label}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def fresh():
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


class AddMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return (x + 1) * (2 * y)

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * (2 * y), g * (x + 1)


class AddMulStepwise(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        z = x + 1
        z = z * 2
        z = z * y
        return z

    @staticmethod
    def backward(ctx, g):
        x, y = ctx.saved_tensors
        return g * (2 * y), g * (x + 1)


# seed000: elementwise expressions on two 1 GiB vectors
n = 256 * 1024 * 1024 // SCALE
for variant in ("nograd", "both", "xonly", "fused", "fused2", "sigmoid_manual", "sigmoid_builtin"):
    x = torch.randn(n, device=device)
    y = torch.randn(n, device=device)
    fresh()
    mark(f"{variant} inputs")
    if variant == "nograd":
        z = (x + 1) * (2 * y)
    elif variant == "both":
        x.requires_grad_(True)
        y.requires_grad_(True)
        z = (x + 1) * (2 * y)
    elif variant == "xonly":
        x.requires_grad_(True)
        z = (x + 1) * (2 * y)
    elif variant == "fused":
        x.requires_grad_(True)
        y.requires_grad_(True)
        z = AddMul.apply(x, y)
    elif variant == "fused2":
        x.requires_grad_(True)
        y.requires_grad_(True)
        z = AddMulStepwise.apply(x, y)
    elif variant == "sigmoid_manual":
        x.requires_grad_(True)
        z = 1 / (1 + torch.exp(-x))
    else:
        x.requires_grad_(True)
        z = torch.nn.Sigmoid()(x)
    mark(f"{variant} compute")
    if z.requires_grad:
        z.sum().backward()
        mark(f"{variant} backward")
    del x, y, z


# seed001: a 5-layer MLP, one SGD step, figures after every stage
class MyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(3, 300)
        self.net2 = nn.Linear(300, 300)
        self.net3 = nn.Linear(300, 400)
        self.net4 = nn.Linear(400, 300)
        self.net5 = nn.Linear(300, 100)

    def forward(self, x):
        return self.net5(self.net4(self.net3(self.net2(self.net1(x)))))


inp = torch.randn(10, 3, device=device)
label = torch.randn(10, 100, device=device)
fresh()
mark("mlp inputs")
model = MyModel().to(device)
mark("mlp model")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
out = model(inp)
mark("mlp forward")
loss = nn.MSELoss()(out, label)
mark("mlp loss")
loss.backward()
mark("mlp backward")
opt.step()
mark("mlp step")
del inp, label, model, opt, out, loss

# seed001b: deleting tensors, then empty_cache
fresh()
mark("del start")
t1 = torch.randn(1024 // SCALE, 1024, device=device)
t2 = torch.randn(2048 // SCALE, 2048, device=device)
mark("del alloc")
del t1
mark("del t1")
del t2
if cuda:
    torch.cuda.empty_cache()
mark("del empty_cache")

# seed002: notebook-style, every output kept alive (as Jupyter's Out[] history would)
fresh()
mark("notebook start")
D = 1024 // SCALE
x = torch.randn(1024, D, device=device)
model = nn.Sequential(
    nn.Linear(D, D, bias=False),
    nn.GELU(),
    nn.Linear(D, D, bias=False),
    nn.GELU(),
    nn.Linear(D, D, bias=False),
).to(device)
mark("notebook model+data")
keep = []
for i in range(3):
    keep.append(model(x))
    mark(f"notebook forward{i}")
with torch.no_grad():
    keep.append(model(x))
mark("notebook forward nograd")
loss = model(x).sum()
loss.backward()
mark("notebook fwd+bwd")
mha = nn.MultiheadAttention(D, 1, bias=False).to(device)
mx = torch.randn(2, 1024, D, device=device)
mark("mha model+data")
for i in range(2):
    keep.append(mha(mx, mx, mx))
    mark(f"mha forward{i}")
with torch.no_grad():
    keep.append(mha(mx, mx, mx))
mark("mha forward nograd")
enc = nn.TransformerEncoderLayer(D, 1, dim_feedforward=4 * D, dropout=0.0).to(device)
ex = torch.randn(2, 1024, D, device=device)
mark("enc model+data")
for i in range(2):
    keep.append(enc(ex))
    mark(f"enc forward{i}")
with torch.no_grad():
    keep.append(enc(ex))
mark("enc forward nograd")
del x, model, keep, loss, mha, mx, enc, ex

# seed003 / seed003b: a 3 GiB leaf, y = 5 * x kept or not, mean().backward()
fresh()
mark("big start")
x = torch.zeros([3, 1024, 1024, 256 // SCALE], requires_grad=True, device=device)
mark("big x")
y = 5 * x
mark("big y")
torch.mean(y).backward()
mark("big backward")
del x, y
fresh()
mark("big2 start")
x = torch.zeros([3, 1024, 1024, 256 // SCALE], requires_grad=True, device=device)
mark("big2 x")
torch.mean(5 * x).backward()
mark("big2 backward")
del x

# encoder layer, 3 AdamW iterations
fresh()
E = 1024 // SCALE
enc = nn.TransformerEncoderLayer(E, 16, dim_feedforward=4 * E, dropout=0.1, batch_first=True).to(device)
opt = torch.optim.AdamW(enc.parameters())
ex = torch.randn(8, 512, E, device=device)
for i in range(3):
    loss = enc(ex).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    mark(f"encoder iter{i}")
