"""Input-gradient regularization by double backward, on the PreActResNet-18 of
locuslab/fast_adversarial's preact_resnet.py written by hand (pre-activation blocks, `out +=
shortcut` in place, widths 64-512, 11.2 M parameters), random CIFAR-shaped batches of 128, fp32.
First Ross & Doshi-Velez 2018 ("Improving the Adversarial Robustness and Interpretability of Deep
Neural Networks by Regularizing their Input Gradients"): the input requires grad, the summed cross
entropy's input gradient taken with `create_graph=True`, its squared L2 norm (lambda 0.1) added to the
mean cross entropy, one backward through the second-order graph (cuDNN batch norm's and convolution's
double backward), AdamW (lr 1e-3, weight decay 5e-4); the first step its own phase, then 2 steps.
Then GradAlign (Andriushchenko & Flammarion 2020, tml-epfl/understanding-fast-adv-training's
get_input_grad and the cosine alignment term, lambda 0.2, without the repository's nonzero-norm
filter): FGSM training with a zero-init input gradient (detached) and a random-init one kept with
its graph, SGD (lr 0.05, momentum 0.9), 2 steps. Then the Jacobian regularizer of Hoffman et al. 2019
(facebookresearch/jacobian_regularizer's JacobianReg with n = 2 random unit projections,
`torch.autograd.grad(flat_y, x, flat_v, retain_graph=True, create_graph=True)`), lambda 0.01, SGD
(lr 0.01, momentum 0.9, nesterov), 2 steps. Then in eval(): clean accuracy of 2 batches of 512
under no_grad and input-gradient saliency norms of 256 by `torch.autograd.grad` without a graph;
6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17504)
if SMALL:
    B, EVAL_B, SAL_B, BLOCKS, WIDTH = 4, 8, 4, [1, 1, 1, 1], 8
else:
    B, EVAL_B, SAL_B, BLOCKS, WIDTH = 128, 512, 256, [2, 2, 2, 2], 64
EPS = 8 / 255
device = "cuda" if torch.cuda.is_available() else "cpu"


class PreActBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=1, padding=1, bias=False)
        if stride != 1 or in_planes != self.expansion * planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False)
            )

    def forward(self, x):
        out = F.relu(self.bn1(x))
        shortcut = self.shortcut(out) if hasattr(self, "shortcut") else x
        out = self.conv1(out)
        out = self.conv2(F.relu(self.bn2(out)))
        out += shortcut
        return out


class PreActResNet(nn.Module):
    def __init__(self, block, num_blocks, num_classes=10, width=64):
        super().__init__()
        self.in_planes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.layer1 = self._make_layer(block, width, num_blocks[0], stride=1)
        self.layer2 = self._make_layer(block, 2 * width, num_blocks[1], stride=2)
        self.layer3 = self._make_layer(block, 4 * width, num_blocks[2], stride=2)
        self.layer4 = self._make_layer(block, 8 * width, num_blocks[3], stride=2)
        self.bn = nn.BatchNorm2d(8 * width * block.expansion)
        self.linear = nn.Linear(8 * width * block.expansion, num_classes)

    def _make_layer(self, block, planes, num_blocks, stride):
        strides = [stride] + [1] * (num_blocks - 1)
        layers = []
        for stride in strides:
            layers.append(block(self.in_planes, planes, stride))
            self.in_planes = planes * block.expansion
        return nn.Sequential(*layers)

    def forward(self, x):
        out = self.conv1(x)
        out = self.layer1(out)
        out = self.layer2(out)
        out = self.layer3(out)
        out = self.layer4(out)
        out = F.relu(self.bn(out))
        out = F.avg_pool2d(out, 4)
        out = out.view(out.size(0), -1)
        return self.linear(out)


def cifar_batch(bs):
    return torch.rand(bs, 3, 32, 32, device=device), torch.randint(0, 10, (bs,), device=device)


model = PreActResNet(PreActBlock, BLOCKS, width=WIDTH).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# Ross & Doshi-Velez: cross entropy + lambda * ||d CE / d x||^2
model.train()
for step in range(3):
    x, y = cifar_batch(B)
    x.requires_grad_(True)
    logits = model(x)
    ce = F.cross_entropy(logits, y)
    (input_grad,) = torch.autograd.grad(F.cross_entropy(logits, y, reduction="sum"), x, create_graph=True)
    reg = input_grad.pow(2).sum(dim=(1, 2, 3)).mean()
    loss = ce + 0.1 * reg
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"ross step {step} ce {ce.item():.4f} grad norm^2 {reg.item():.4e}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, logits, ce, input_grad, reg, loss
if device == "cuda":
    print(f"ross peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


# GradAlign (tml-epfl/understanding-fast-adv-training)
def get_uniform_delta(shape, eps, requires_grad=True):
    delta = torch.zeros(shape, device=device)
    delta.uniform_(-eps, eps)
    delta.requires_grad = requires_grad
    return delta


def get_input_grad(model, X, y, eps, delta_init="none", backprop=False):
    if delta_init == "none":
        delta = torch.zeros_like(X, requires_grad=True)
    else:
        delta = get_uniform_delta(X.shape, eps, requires_grad=True)
    output = model(X + delta)
    loss = F.cross_entropy(output, y)
    grad = torch.autograd.grad(loss, delta, create_graph=True if backprop else False)[0]
    if not backprop:
        grad, delta = grad.detach(), delta.detach()
    return grad


def l2_norm_batch(v):
    return (v**2).sum([1, 2, 3]) ** 0.5


sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
for step in range(2):
    X, y = cifar_batch(B)
    delta = get_uniform_delta(X.shape, EPS, requires_grad=True)
    X_adv = torch.clamp(X + delta, 0, 1)
    output = model(X_adv)
    loss = F.cross_entropy(output, y)
    grad = torch.autograd.grad(loss, delta, create_graph=False)[0]
    grad = grad.detach()
    delta.data = delta + 1.25 * EPS * torch.sign(grad)
    delta.data = torch.clamp(delta.data, -EPS, EPS)
    X_adv = torch.clamp(X + delta.detach(), 0, 1)
    output = model(X_adv)
    loss = F.cross_entropy(output, y)
    grad1 = get_input_grad(model, X, y, EPS, delta_init="none", backprop=False)
    grad2 = get_input_grad(model, X, y, EPS, delta_init="random_uniform", backprop=True)
    grad1_norms, grad2_norms = l2_norm_batch(grad1), l2_norm_batch(grad2)
    grad1_normalized = grad1 / grad1_norms[:, None, None, None]
    grad2_normalized = grad2 / grad2_norms[:, None, None, None]
    cos = torch.sum(grad1_normalized * grad2_normalized, (1, 2, 3))
    reg = 0.2 * (1.0 - cos.mean())
    loss = loss + reg
    sgd.zero_grad()
    loss.backward()
    sgd.step()
    print(f"gradalign step {step} loss {loss.item():.4f} cos {cos.mean().item():.4f}")
del X, y, delta, X_adv, output, loss, grad, grad1, grad2, grad1_normalized, grad2_normalized, cos, reg
if device == "cuda":
    print(f"gradalign peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class JacobianReg(nn.Module):
    def __init__(self, n=1):
        assert n == -1 or n > 0
        self.n = n
        super().__init__()

    def forward(self, x, y):
        B, C = y.shape
        num_proj = C if self.n == -1 else self.n
        J2 = 0
        for ii in range(num_proj):
            if self.n == -1:
                v = torch.zeros(B, C)
                v[:, ii] = 1
            else:
                v = self._random_vector(C=C, B=B)
            if x.is_cuda:
                v = v.cuda()
            Jv = self._jacobian_vector_product(y, x, v, create_graph=True)
            J2 += C * torch.norm(Jv) ** 2 / (num_proj * B)
        return (1 / 2) * J2

    def _random_vector(self, C, B):
        if C == 1:
            return torch.ones(B)
        v = torch.randn(B, C)
        arxilirary_zero = torch.zeros(B, C)
        vnorm = torch.norm(v, 2, 1, True)
        return torch.addcdiv(arxilirary_zero, v, vnorm, value=1.0)

    def _jacobian_vector_product(self, y, x, v, create_graph=False):
        flat_y = y.reshape(-1)
        flat_v = v.reshape(-1)
        (grad_x,) = torch.autograd.grad(flat_y, x, flat_v, retain_graph=True, create_graph=create_graph)
        return grad_x


reg_fn = JacobianReg(n=2)
nesterov = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
for step in range(2):
    data, target = cifar_batch(B)
    data.requires_grad = True
    nesterov.zero_grad()
    output = model(data)
    loss_super = F.cross_entropy(output, target)
    R = reg_fn(data, output)
    loss = loss_super + 0.01 * R
    loss.backward()
    nesterov.step()
    print(f"jacreg step {step} ce {loss_super.item():.4f} R {R.item():.4f}")
del data, target, output, loss_super, R, loss
if device == "cuda":
    print(f"jacreg peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x, y = cifar_batch(EVAL_B)
        correct += (model(x).argmax(1) == y).sum().item()
x, y = cifar_batch(SAL_B)
x.requires_grad_(True)
(saliency,) = torch.autograd.grad(F.cross_entropy(model(x), y), x)
norms = saliency.flatten(1).norm(dim=1)
print(f"clean acc {correct / (2 * EVAL_B):.3f} saliency norm mean {norms.mean().item():.4e}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
