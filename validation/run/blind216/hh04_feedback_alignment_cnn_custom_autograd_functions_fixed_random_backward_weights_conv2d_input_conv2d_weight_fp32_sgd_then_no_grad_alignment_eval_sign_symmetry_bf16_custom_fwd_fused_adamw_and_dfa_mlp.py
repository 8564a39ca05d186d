"""Feedback alignment (Lillicrap et al. 2016) for a CNN: every Conv2d and Linear is a custom
torch.autograd.Function whose backward sends the error to the layer below through a fixed random matrix B
(a buffer of the weight's shape) instead of W^T, while the weight gradient stays the true one. The conv
backward uses torch.nn.grad.conv2d_input (with B) and torch.nn.grad.conv2d_weight.

Network: five 3x3 conv layers 3 -> 64 -> 128 -> 256 -> 256 -> 512 with BatchNorm and ReLU (the BN and ReLU
by ordinary autograd), 2x2 max pooling after each but the first, global average pooling, an FA Linear
512 -> 1000. Random 128 x 128 images, 1000 classes.

Phases: 3 FA steps at batch 128 in fp32 with SGD momentum; evaluation under no_grad at batch 512 with the
angle between each W and its B; 3 steps of sign symmetry (Liao et al. 2016: B = sign(W) taken at every
backward) under bf16 autocast, the Functions wrapped by torch.amp.custom_fwd / custom_bwd, fused AdamW;
then direct feedback alignment (Nokland 2016) of a 12288 -> 4 x 4096 -> 1000 tanh MLP at batch 1024: each
layer's input detached, the output error projected to every hidden layer by its own fixed matrix and fed
through torch.autograd.backward(hiddens, grad_tensors), fp32 SGD. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2164)
device = "cuda" if torch.cuda.is_available() else "cpu"
BATCH, EVAL_BATCH, RES = (4, 8, 32) if SMALL else (128, 512, 128)
DFA_BATCH, DFA_IN, DFA_HIDDEN = (16, 3 * 32 * 32, 128) if SMALL else (1024, 3 * 64 * 64, 4096)
CLASSES = 1000
SIGN_SYMMETRY = False


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Conv2dFA(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, weight, bias, feedback, padding):
        ctx.save_for_backward(x, weight, feedback)
        ctx.padding = padding
        return F.conv2d(x, weight, bias, padding=padding)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        x, weight, feedback = ctx.saved_tensors
        b = torch.sign(weight) if SIGN_SYMMETRY else feedback
        grad_x = torch.nn.grad.conv2d_input(x.shape, b.to(grad.dtype), grad, padding=ctx.padding)
        grad_w = torch.nn.grad.conv2d_weight(x, weight.shape, grad, padding=ctx.padding)
        return grad_x, grad_w.to(weight.dtype), grad.sum((0, 2, 3)).to(weight.dtype), None, None


class LinearFA(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, weight, bias, feedback):
        ctx.save_for_backward(x, weight, feedback)
        return F.linear(x, weight, bias)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        x, weight, feedback = ctx.saved_tensors
        b = torch.sign(weight) if SIGN_SYMMETRY else feedback
        grad_x = grad @ b.to(grad.dtype)
        grad_w = grad.t() @ x.to(grad.dtype)
        return grad_x, grad_w.to(weight.dtype), grad.sum(0).to(weight.dtype), None


class FAConv(nn.Conv2d):
    def __init__(self, cin, cout):
        super().__init__(cin, cout, 3, padding=1)
        self.register_buffer("feedback", torch.empty_like(self.weight))
        nn.init.kaiming_uniform_(self.feedback)

    def forward(self, x):
        return Conv2dFA.apply(x, self.weight, self.bias, self.feedback, self.padding)


class FALinear(nn.Linear):
    def __init__(self, fin, fout):
        super().__init__(fin, fout)
        self.register_buffer("feedback", torch.empty_like(self.weight))
        nn.init.kaiming_uniform_(self.feedback)

    def forward(self, x):
        return LinearFA.apply(x, self.weight, self.bias, self.feedback)


class FACNN(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [3, 64, 128, 256, 256, 512]
        self.convs = nn.ModuleList(FAConv(a, b) for a, b in zip(chans[:-1], chans[1:]))
        self.bns = nn.ModuleList(nn.BatchNorm2d(c) for c in chans[1:])
        self.fc = FALinear(512, CLASSES)

    def forward(self, x):
        for i, (conv, bn) in enumerate(zip(self.convs, self.bns)):
            x = F.relu(bn(conv(x)))
            if i > 0:
                x = F.max_pool2d(x, 2)
        return self.fc(x.mean((2, 3)))


def batch(n):
    return torch.randn(n, 3, RES, RES, device=device), torch.randint(0, CLASSES, (n,), device=device)


model = FACNN().to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
for it in range(3):
    x, y = batch(BATCH)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"fa loss {loss.item():.4f}")
report("feedback alignment fp32")

model.eval()
with torch.no_grad():
    x, y = batch(EVAL_BATCH)
    acc = (model(x).argmax(1) == y).float().mean().item()
    layers = list(model.convs) + [model.fc]
    angles = [
        torch.rad2deg(torch.acos(F.cosine_similarity(m.weight.flatten(), m.feedback.flatten(), dim=0))).item()
        for m in layers
    ]
print(f"eval acc {acc:.4f} angles {[round(a, 1) for a in angles]}")
report("eval angles")

model.train()
SIGN_SYMMETRY = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
for it in range(3):
    x, y = batch(BATCH)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"sign symmetry loss {loss.item():.4f}")
report("sign symmetry bf16 fused adamw")

# direct feedback alignment of a tanh MLP
del opt
dims = [DFA_IN] + [DFA_HIDDEN] * 4
mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])).to(device)
readout = nn.Linear(DFA_HIDDEN, CLASSES).to(device)
dfa_b = [torch.randn(CLASSES, DFA_HIDDEN, device=device) / DFA_HIDDEN**0.5 for _ in mlp]
dfa_opt = torch.optim.SGD(list(mlp.parameters()) + list(readout.parameters()), lr=1e-3, momentum=0.9)
for it in range(3):
    x = torch.randn(DFA_BATCH, DFA_IN, device=device)
    y = torch.randint(0, CLASSES, (DFA_BATCH,), device=device)
    h = x
    pre = []
    for layer in mlp:
        a = layer(h.detach())
        pre.append(a)
        h = torch.tanh(a)
    logits = readout(h.detach())
    loss = F.cross_entropy(logits, y)
    dfa_opt.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        e = torch.softmax(logits, 1) - F.one_hot(y, CLASSES).float()
        grads = [(e @ b) * (1 - torch.tanh(a).square()) / DFA_BATCH for a, b in zip(pre, dfa_b)]
    torch.autograd.backward(pre, grads)
    dfa_opt.step()
    del pre, grads, h, a
print(f"dfa loss {loss.item():.4f}")
report("dfa mlp")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
