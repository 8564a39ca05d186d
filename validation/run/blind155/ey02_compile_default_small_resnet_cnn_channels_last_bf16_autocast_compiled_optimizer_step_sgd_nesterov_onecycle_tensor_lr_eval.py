"""torch.compile(model) (default mode) of a small ResNet-style CNN for 64 x 64 images (a 3 x 3 stem of
64 channels, three stages of one BasicBlock each at 64/128/256 channels with stride-2 downsampling and
1 x 1 projection shortcuts, BatchNorm, global average pooling, 200 classes), channels-last, trained under
bf16 autocast, and the optimizer step compiled too, as PyTorch's "compiling the optimizer" recipe writes
it: SGD with Nesterov momentum and weight decay whose lr is a tensor (so OneCycleLR's changes do not
recompile), `@torch.compile(fullgraph=False) def opt_step(): opt.step()`, the scheduler stepped eagerly.
Batch 256 for 3 steps, then evaluation of 512 images under no_grad. 5 phases: the model and optimizer,
each training step, the evaluation."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15502)
if SMALL:
    IMG, B, EB, NCLS, W = 16, 4, 8, 10, (8, 16, 32)
else:
    IMG, B, EB, NCLS, W = 64, 256, 512, 200, (64, 128, 256)
device = "cuda" if torch.cuda.is_available() else "cpu"


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Sequential()
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.short(x))


class SmallResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, W[0], 3, 1, 1, bias=False), nn.BatchNorm2d(W[0]), nn.ReLU(inplace=True)
        )
        self.layer1 = BasicBlock(W[0], W[0], 1)
        self.layer2 = BasicBlock(W[0], W[1], 2)
        self.layer3 = BasicBlock(W[1], W[2], 2)
        self.fc = nn.Linear(W[2], NCLS)

    def forward(self, x):
        x = self.layer3(self.layer2(self.layer1(self.stem(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


model = SmallResNet().to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(
    model.parameters(), lr=torch.tensor(0.01), momentum=0.9, nesterov=True, weight_decay=5e-4
)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
cmodel = torch.compile(model)


@torch.compile(fullgraph=False)
def opt_step():
    opt.step()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = F.cross_entropy(cmodel(x), y)
    loss.backward()
    opt_step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss
model.eval()
correct = 0
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    x = torch.randn(EB, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, NCLS, (EB,), device=device)
    correct = (cmodel(x).argmax(1) == y).sum().item()
if device == "cuda":
    print(
        f"eval correct {correct} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
