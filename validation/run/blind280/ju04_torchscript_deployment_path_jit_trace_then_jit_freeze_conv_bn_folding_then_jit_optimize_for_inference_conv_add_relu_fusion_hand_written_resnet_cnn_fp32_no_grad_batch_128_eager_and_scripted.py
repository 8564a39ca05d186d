"""The TorchScript deployment path of a CNN, run side by side with eager as a user checks it: a
hand-written ResNet-style network (stem 7x7/2 conv + BatchNorm + ReLU + max-pool, four stages of two
basic residual blocks with 64/128/256/512 channels, projection shortcuts, global average pool, 1000-way
head), fp32, eval mode, on a batch of 128 images of 224 x 224 under no_grad. Phase 1: model and batch.
Phase 2: the eager pass. Phase 3: `torch.jit.trace` (the traced module shares the eager parameters),
then two traced passes (the profiling executor profiles the first run and optimizes the second).
Phase 4: `torch.jit.freeze` (parameters inlined as constants, BatchNorm folded into the preceding
convolutions: new folded weights and biases computed on the GPU), two frozen passes. Phase 5:
`torch.jit.optimize_for_inference(torch.jit.freeze(traced))`, a second frozen copy (a module's
graph executor keeps the plan of its first run, so optimizing the already-run frozen module in place
would not change what it executes), whose CUDA pass fuses conv + (add +) relu into cuDNN's fused
convolutions; two passes, then the outputs' largest difference to eager. Phase 6: the eager model
and the traced and first frozen modules dropped, one more optimized pass. TF32 off. Seeded; no
value-dependent sizes."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2804)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        s = x if self.short is None else self.short(x)
        return F.relu(y + s)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(512, 1000)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


model = Net().to(dev)
with torch.no_grad():  # non-trivial running statistics, so folding changes the weights
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
model.eval()
images = torch.randn(128, 3, 224, 224, device=dev)
report("model")

with torch.no_grad():
    eager = model(images)
report("eager")

with torch.no_grad():
    traced = torch.jit.trace(model, images[:8])
    for _ in range(2):
        out = traced(images)
del out
report("traced")

frozen = torch.jit.freeze(traced)
with torch.no_grad():
    for _ in range(2):
        out = frozen(images)
del out
report("frozen")

optimized = torch.jit.optimize_for_inference(torch.jit.freeze(traced))  # a second frozen copy
with torch.no_grad():
    for _ in range(2):
        out = optimized(images)
    print("max difference to eager", (out - eager).abs().max().item())
del out
report("optimized")

del model, traced, frozen
with torch.no_grad():
    out = optimized(images)
print("top class of image 0", out[0].argmax().item())
report("end")
