"""DARTS (Liu et al. 2019) differentiable architecture search on random CIFAR-sized images.

The supernet: a 3x3 conv stem (3 -> 48), 5 cells of 4 intermediate nodes (reduction cells at 1/3 and 2/3
of the depth), each of the 14 edges a MixedOp of DARTS's 8 candidates (none, 3x3 max and avg pooling each
followed by an affine-free BatchNorm, skip connect / FactorizedReduce, separable convs 3x3 and 5x5, dilated
convs 3x3 and 5x5, all ReLU-Conv-BN with affine-free BN) weighted by a softmax over architecture
parameters (one alpha matrix for normal and one for reduction cells), the cell output the concatenation
of its 4 nodes.

Phases: 3 steps of first-order DARTS at batch 64 (an Adam step of the alphas on a validation batch, then
an SGD momentum step of the weights with gradient clipping on a training batch), fp32; 2 steps of
second-order DARTS (the unrolled model w' = w - xi * dL_train/dw by torch.autograd.grad, the validation
loss through torch.func.functional_call on w', and the Hessian-vector product by finite differences:
the weights moved in place by +-eps * dL_val/dw' and dL_train/dalpha taken at each); evaluation of the
supernet under no_grad at batch 256; then the DARTS-V2 genotype (the paper's cell, hard-coded) built as a
discrete network (C = 36, 8 cells, drop path) in channels_last and trained 3 steps under bf16 autocast
with SGD nesterov at batch 96. 4 phases."""

import os
from collections import namedtuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2212)
device = "cuda" if torch.cuda.is_available() else "cpu"
C, LAYERS, STEPS, MULT, CLASSES = (8, 5, 4, 4, 10) if SMALL else (16, 5, 4, 4, 10)
BATCH, EVAL_BATCH, V2_BATCH = (4, 8, 4) if SMALL else (64, 256, 96)
V2_C, V2_LAYERS = (8, 5) if SMALL else (36, 8)


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class ReLUConvBN(nn.Sequential):
    def __init__(self, c_in, c_out, k, stride, pad, affine=True):
        super().__init__(
            nn.ReLU(inplace=False),
            nn.Conv2d(c_in, c_out, k, stride, pad, bias=False),
            nn.BatchNorm2d(c_out, affine=affine),
        )


class DilConv(nn.Sequential):
    def __init__(self, c_in, c_out, k, stride, pad, dilation, affine=True):
        super().__init__(
            nn.ReLU(inplace=False),
            nn.Conv2d(c_in, c_in, k, stride, pad, dilation=dilation, groups=c_in, bias=False),
            nn.Conv2d(c_in, c_out, 1, bias=False),
            nn.BatchNorm2d(c_out, affine=affine),
        )


class SepConv(nn.Sequential):
    def __init__(self, c_in, c_out, k, stride, pad, affine=True):
        super().__init__(
            DilConv(c_in, c_in, k, stride, pad, 1, affine), DilConv(c_in, c_out, k, 1, pad, 1, affine)
        )


class Zero(nn.Module):
    def __init__(self, stride):
        super().__init__()
        self.stride = stride

    def forward(self, x):
        return x.mul(0.0) if self.stride == 1 else x[:, :, :: self.stride, :: self.stride].mul(0.0)


class FactorizedReduce(nn.Module):
    def __init__(self, c_in, c_out, affine=True):
        super().__init__()
        self.relu = nn.ReLU(inplace=False)
        self.conv_1 = nn.Conv2d(c_in, c_out // 2, 1, stride=2, bias=False)
        self.conv_2 = nn.Conv2d(c_in, c_out // 2, 1, stride=2, bias=False)
        self.bn = nn.BatchNorm2d(c_out, affine=affine)

    def forward(self, x):
        x = self.relu(x)
        return self.bn(torch.cat([self.conv_1(x), self.conv_2(x[:, :, 1:, 1:])], dim=1))


OPS = {
    "none": lambda c, s, a: Zero(s),
    "avg_pool_3x3": lambda c, s, a: nn.AvgPool2d(3, stride=s, padding=1, count_include_pad=False),
    "max_pool_3x3": lambda c, s, a: nn.MaxPool2d(3, stride=s, padding=1),
    "skip_connect": lambda c, s, a: nn.Identity() if s == 1 else FactorizedReduce(c, c, a),
    "sep_conv_3x3": lambda c, s, a: SepConv(c, c, 3, s, 1, a),
    "sep_conv_5x5": lambda c, s, a: SepConv(c, c, 5, s, 2, a),
    "dil_conv_3x3": lambda c, s, a: DilConv(c, c, 3, s, 2, 2, a),
    "dil_conv_5x5": lambda c, s, a: DilConv(c, c, 5, s, 4, 2, a),
}
PRIMITIVES = list(OPS)


class MixedOp(nn.Module):
    def __init__(self, c, stride):
        super().__init__()
        self._ops = nn.ModuleList()
        for name in PRIMITIVES:
            op = OPS[name](c, stride, False)
            if "pool" in name:
                op = nn.Sequential(op, nn.BatchNorm2d(c, affine=False))
            self._ops.append(op)

    def forward(self, x, weights):
        return sum(w * op(x) for w, op in zip(weights, self._ops))


class SearchCell(nn.Module):
    def __init__(self, c_pp, c_p, c, reduction, reduction_prev):
        super().__init__()
        self.reduction = reduction
        self.pre0 = (
            FactorizedReduce(c_pp, c, False) if reduction_prev else ReLUConvBN(c_pp, c, 1, 1, 0, False)
        )
        self.pre1 = ReLUConvBN(c_p, c, 1, 1, 0, False)
        self._ops = nn.ModuleList()
        for i in range(STEPS):
            for j in range(2 + i):
                self._ops.append(MixedOp(c, 2 if reduction and j < 2 else 1))

    def forward(self, s0, s1, weights):
        states = [self.pre0(s0), self.pre1(s1)]
        offset = 0
        for i in range(STEPS):
            s = sum(self._ops[offset + j](h, weights[offset + j]) for j, h in enumerate(states))
            offset += len(states)
            states.append(s)
        return torch.cat(states[-MULT:], dim=1)


class Network(nn.Module):
    def __init__(self, c, classes, layers):
        super().__init__()
        c_curr = 3 * c
        self.stem = nn.Sequential(nn.Conv2d(3, c_curr, 3, padding=1, bias=False), nn.BatchNorm2d(c_curr))
        c_pp, c_p, c_curr = c_curr, c_curr, c
        self.cells = nn.ModuleList()
        reduction_prev = False
        for i in range(layers):
            reduction = i in (layers // 3, 2 * layers // 3)
            if reduction:
                c_curr *= 2
            self.cells.append(SearchCell(c_pp, c_p, c_curr, reduction, reduction_prev))
            reduction_prev = reduction
            c_pp, c_p = c_p, MULT * c_curr
        self.classifier = nn.Linear(c_p, classes)
        k = sum(2 + i for i in range(STEPS))
        self.alphas_normal = nn.Parameter(1e-3 * torch.randn(k, len(PRIMITIVES)))
        self.alphas_reduce = nn.Parameter(1e-3 * torch.randn(k, len(PRIMITIVES)))

    def arch_parameters(self):
        return [self.alphas_normal, self.alphas_reduce]

    def weight_parameters(self):
        return [p for n, p in self.named_parameters() if not n.startswith("alphas")]

    def forward(self, x):
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            weights = F.softmax(self.alphas_reduce if cell.reduction else self.alphas_normal, dim=-1)
            s0, s1 = s1, cell(s0, s1, weights)
        return self.classifier(F.adaptive_avg_pool2d(s1, 1).flatten(1))


def batch(n):
    return torch.randn(n, 3, 32, 32, device=device), torch.randint(0, CLASSES, (n,), device=device)


model = Network(C, CLASSES, LAYERS).to(device)
w_opt = torch.optim.SGD(model.weight_parameters(), lr=0.025, momentum=0.9, weight_decay=3e-4)
a_opt = torch.optim.Adam(model.arch_parameters(), lr=3e-4, betas=(0.5, 0.999), weight_decay=1e-3)

for step in range(3):
    xt, yt = batch(BATCH)
    xv, yv = batch(BATCH)
    a_opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(xv), yv).backward()
    a_opt.step()
    w_opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(xt), yt)
    loss.backward()
    nn.utils.clip_grad_norm_(model.weight_parameters(), 5.0)
    w_opt.step()
print(f"first-order loss {loss.item():.4f}")
report("darts first order")

XI, R = 0.025, 0.01
names = [n for n, _ in model.named_parameters() if not n.startswith("alphas")]
for step in range(2):
    xt, yt = batch(BATCH)
    xv, yv = batch(BATCH)
    weights = model.weight_parameters()
    # unrolled model w' = w - xi * dL_train/dw
    g_train = torch.autograd.grad(F.cross_entropy(model(xt), yt), weights)
    unrolled = {n: (w - XI * g).detach().requires_grad_() for n, w, g in zip(names, weights, g_train)}
    del g_train
    params = dict(model.named_parameters())
    params.update(unrolled)
    val_loss = F.cross_entropy(functional_call(model, params, (xv,)), yv)
    grads = torch.autograd.grad(val_loss, model.arch_parameters() + list(unrolled.values()))
    d_alpha, d_w = grads[:2], grads[2:]
    del unrolled, params, val_loss, grads
    # finite-difference Hessian-vector product
    eps = R / torch.cat([g.flatten() for g in d_w]).norm()
    with torch.no_grad():
        for w, v in zip(weights, d_w):
            w.add_(v, alpha=eps.item())
    g_pos = torch.autograd.grad(F.cross_entropy(model(xt), yt), model.arch_parameters())
    with torch.no_grad():
        for w, v in zip(weights, d_w):
            w.sub_(v, alpha=2 * eps.item())
    g_neg = torch.autograd.grad(F.cross_entropy(model(xt), yt), model.arch_parameters())
    with torch.no_grad():
        for w, v in zip(weights, d_w):
            w.add_(v, alpha=eps.item())
    a_opt.zero_grad(set_to_none=True)
    for a, da, gp, gn in zip(model.arch_parameters(), d_alpha, g_pos, g_neg):
        a.grad = da - XI * (gp - gn) / (2 * eps)
    a_opt.step()
    del d_alpha, d_w, g_pos, g_neg
    w_opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(xt), yt)
    loss.backward()
    nn.utils.clip_grad_norm_(model.weight_parameters(), 5.0)
    w_opt.step()
print(f"second-order loss {loss.item():.4f}")
report("darts second order unrolled")

model.eval()
with torch.no_grad():
    x, y = batch(EVAL_BATCH)
    acc = (model(x).argmax(1) == y).float().mean().item()
print(f"supernet eval acc {acc:.4f}")
report("supernet no_grad eval")

# the paper's DARTS-V2 cell, trained as a discrete network
del model, w_opt, a_opt, loss
Genotype = namedtuple("Genotype", "normal normal_concat reduce reduce_concat")
DARTS_V2 = Genotype(
    normal=[("sep_conv_3x3", 0), ("sep_conv_3x3", 1), ("sep_conv_3x3", 0), ("sep_conv_3x3", 1),
            ("sep_conv_3x3", 1), ("skip_connect", 0), ("skip_connect", 0), ("dil_conv_3x3", 2)],
    normal_concat=[2, 3, 4, 5],
    reduce=[("max_pool_3x3", 0), ("max_pool_3x3", 1), ("skip_connect", 2), ("max_pool_3x3", 1),
            ("max_pool_3x3", 0), ("skip_connect", 2), ("skip_connect", 2), ("max_pool_3x3", 1)],
    reduce_concat=[2, 3, 4, 5],
)  # fmt: skip


def drop_path(x, p):
    if p > 0.0:
        mask = torch.empty(x.size(0), 1, 1, 1, device=x.device, dtype=x.dtype).bernoulli_(1 - p)
        x = x.div(1 - p).mul(mask)
    return x


class EvalCell(nn.Module):
    def __init__(self, genotype, c_pp, c_p, c, reduction, reduction_prev):
        super().__init__()
        self.pre0 = FactorizedReduce(c_pp, c) if reduction_prev else ReLUConvBN(c_pp, c, 1, 1, 0)
        self.pre1 = ReLUConvBN(c_p, c, 1, 1, 0)
        ops, self.concat = (
            (genotype.reduce, genotype.reduce_concat)
            if reduction
            else (genotype.normal, genotype.normal_concat)
        )
        self.indices = [i for _, i in ops]
        self._ops = nn.ModuleList(OPS[name](c, 2 if reduction and i < 2 else 1, True) for name, i in ops)

    def forward(self, s0, s1, p):
        states = [self.pre0(s0), self.pre1(s1)]
        for i in range(len(self._ops) // 2):
            hs = []
            for k in (2 * i, 2 * i + 1):
                op = self._ops[k]
                h = op(states[self.indices[k]])
                if self.training and not isinstance(op, nn.Identity):
                    h = drop_path(h, p)
                hs.append(h)
            states.append(hs[0] + hs[1])
        return torch.cat([states[i] for i in self.concat], dim=1)


class EvalNetwork(nn.Module):
    def __init__(self, c, classes, layers, genotype):
        super().__init__()
        c_curr = 3 * c
        self.stem = nn.Sequential(nn.Conv2d(3, c_curr, 3, padding=1, bias=False), nn.BatchNorm2d(c_curr))
        c_pp, c_p, c_curr = c_curr, c_curr, c
        self.cells = nn.ModuleList()
        reduction_prev = False
        for i in range(layers):
            reduction = i in (layers // 3, 2 * layers // 3)
            if reduction:
                c_curr *= 2
            self.cells.append(EvalCell(genotype, c_pp, c_p, c_curr, reduction, reduction_prev))
            reduction_prev = reduction
            c_pp, c_p = c_p, len(genotype.normal_concat) * c_curr
        self.classifier = nn.Linear(c_p, classes)

    def forward(self, x, p=0.2):
        s0 = s1 = self.stem(x)
        for cell in self.cells:
            s0, s1 = s1, cell(s0, s1, p)
        return self.classifier(F.adaptive_avg_pool2d(s1, 1).flatten(1))


net = EvalNetwork(V2_C, CLASSES, V2_LAYERS, DARTS_V2).to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(net.parameters(), lr=0.025, momentum=0.9, nesterov=True, weight_decay=3e-4)
for step in range(3):
    x, y = batch(V2_BATCH)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(net(x), y, label_smoothing=0.1)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(net.parameters(), 5.0)
    opt.step()
print(f"darts-v2 loss {loss.item():.4f}")
report("darts-v2 genotype bf16 channels_last")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
