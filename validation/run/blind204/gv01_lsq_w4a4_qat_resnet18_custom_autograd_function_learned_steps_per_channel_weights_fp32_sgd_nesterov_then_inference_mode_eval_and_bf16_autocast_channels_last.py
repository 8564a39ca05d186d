"""LSQ (learned step size quantization, Esser et al. 2020) W4A4 quantization-aware training of a torchvision
resnet18 (random init, 1000 classes) on ImageNet-sized random batches.

Every Conv2d except the stem is replaced by an LSQ convolution: its weight fake-quantized to signed 4 bits
(-8..7) with a learned step per output channel, its input to unsigned 4 bits (0..15, inputs follow ReLU)
with one learned step. The quantizer is a custom torch.autograd.Function (saves the input and the step;
backward is the straight-through estimator inside the range plus LSQ's step gradient scaled by
1 / sqrt(numel * Qp), reduced with sum_to_size). Steps are initialised from the first batch (2 mean|x| /
sqrt(Qp)). The stem conv and fc stay in full precision.

fp32, batch 96 at 224x224, SGD momentum 0.9 nesterov, weight decay 1e-4 on weights only (not on steps,
BN or biases), cross-entropy with label smoothing 0.1.

Phases: the first step (step initialisation); 3 more steps; evaluation under inference_mode at batch 256
(top-1 against random labels); 3 steps of the same model in channels_last under bf16 autocast. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2041)
BATCH, EVAL_BATCH, RES = (4, 8, 64) if SMALL else (96, 256, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class LsqQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, step, g, qn, qp):
        ctx.save_for_backward(x, step)
        ctx.other = (g, qn, qp)
        return torch.clamp(torch.round(x / step), qn, qp) * step

    @staticmethod
    def backward(ctx, grad):
        x, step = ctx.saved_tensors
        g, qn, qp = ctx.other
        q = x / step
        lower = (q < qn).to(grad.dtype)
        upper = (q > qp).to(grad.dtype)
        middle = 1.0 - lower - upper
        grad_step = (lower * qn + upper * qp + middle * (torch.round(q) - q)) * grad * g
        return middle * grad, grad_step.sum_to_size(step.shape), None, None, None


class LsqConv2d(nn.Conv2d):
    def __init__(self, conv, w_bits=4, a_bits=4):
        super().__init__(
            conv.in_channels,
            conv.out_channels,
            conv.kernel_size,
            conv.stride,
            conv.padding,
            conv.dilation,
            conv.groups,
            conv.bias is not None,
        )
        self.weight = conv.weight
        self.bias = conv.bias
        self.wqn, self.wqp = -(2 ** (w_bits - 1)), 2 ** (w_bits - 1) - 1
        self.aqn, self.aqp = 0, 2**a_bits - 1
        self.w_step = nn.Parameter(torch.ones(self.out_channels, 1, 1, 1))
        self.a_step = nn.Parameter(torch.tensor(1.0))
        self.register_buffer("initialized", torch.tensor(False))

    def forward(self, x):
        if not self.initialized:
            with torch.no_grad():
                w = self.weight.detach()
                self.w_step.copy_(2 * w.abs().mean(dim=(1, 2, 3), keepdim=True) / math.sqrt(self.wqp))
                self.a_step.copy_(2 * x.detach().abs().mean() / math.sqrt(self.aqp))
                self.initialized.fill_(True)
        wg = 1.0 / math.sqrt(self.weight[0].numel() * self.wqp)
        ag = 1.0 / math.sqrt(x[0].numel() * self.aqp)
        wq = LsqQuant.apply(self.weight, self.w_step, wg, self.wqn, self.wqp)
        xq = LsqQuant.apply(x, self.a_step, ag, self.aqn, self.aqp)
        return self._conv_forward(xq, wq, self.bias)


def quantize_model(module, skip):
    for name, child in module.named_children():
        full = f"{skip[0]}.{name}" if skip[0] else name
        if isinstance(child, nn.Conv2d) and full != "conv1":
            setattr(module, name, LsqConv2d(child))
        else:
            quantize_model(child, (full,))


model = torchvision.models.resnet18(num_classes=1000)
quantize_model(model, ("",))
model = model.to(device)

decay, no_decay = [], []
for n, p in model.named_parameters():
    (decay if p.ndim > 1 and "step" not in n else no_decay).append(p)
opt = torch.optim.SGD(
    [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
    lr=0.01,
    momentum=0.9,
    nesterov=True,
)
criterion = nn.CrossEntropyLoss(label_smoothing=0.1)


def batch(n):
    x = torch.randn(n, 3, RES, RES, device=device)
    y = torch.randint(0, 1000, (n,), device=device)
    return x, y


def train_step(autocast=False, channels_last=False):
    x, y = batch(BATCH)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
        out = model(x)
        loss = criterion(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


model.train()
print(f"step 0 loss {train_step():.4f}")
report("first step")
for _ in range(3):
    loss = train_step()
print(f"step 3 loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode():
    x, y = batch(EVAL_BATCH)
    top1 = (model(x).argmax(1) == y).float().mean().item()
print(f"eval top1 {top1:.4f}")
report("eval")

model.train()
model = model.to(memory_format=torch.channels_last)
for _ in range(3):
    loss = train_step(autocast=True, channels_last=True)
print(f"bf16 channels_last loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
