"""Dark Experience Replay++ (Buzzega et al. 2020) in the style of the mammoth repository, by hand:
a CIFAR ResNet-18 (3 x 3 stem without max pool, BasicBlocks of 64/128/256/512, nf=64) over a
class-incremental stream of 32 x 32 images, 5 tasks of 20 classes, batch 128 from the stream. The
replay buffer lives on the GPU: 2,000 examples (fp32 images, int64 labels, fp32 logits of 100
classes, int64 task ids, allocated at the start), filled by reservoir sampling decided on the host
(a host-side torch.Generator draws each incoming example's slot once the buffer is full; the chosen
rows are written with index_copy_). Each step after the buffer holds data draws two minibatches of
128 from it by host-drawn indices (advanced indexing on the device): one for the logit MSE (alpha
0.3), one for the label cross-entropy (beta 0.5), each its own forward; the stream logits, detached
(`outputs.data`), go into the buffer. SGD lr 0.03, fp32. The first step its own phase (empty
buffer), then 4 steps per task over 5 tasks (the buffer full after 16 steps). Then
class-incremental evaluation of 4 batches of 512 under torch.inference_mode; then plain Experience
Replay with a fresh model in channels_last under bf16 autocast, AdamW (foreach=True, lr 1e-3), the
stream and one buffer batch concatenated into one forward of 256, 4 steps; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18102)
host_gen = torch.Generator().manual_seed(18102)
if SMALL:
    B, BUF, STEPS_PER_TASK, N_TASKS, EVAL_B, NF = 8, 20, 2, 2, 16, 8
else:
    B, BUF, STEPS_PER_TASK, N_TASKS, EVAL_B, NF = 128, 2000, 4, 5, 512, 64
N_CLASSES = 100
CPT = N_CLASSES // 5
ALPHA, BETA = 0.3, 0.5
device = "cuda" if torch.cuda.is_available() else "cpu"


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_blocks=(2, 2, 2, 2), num_classes=N_CLASSES, nf=NF):
        super().__init__()
        self.in_planes = nf
        self.conv1 = nn.Conv2d(3, nf, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(nf)
        self.layer1 = self._make_layer(nf, num_blocks[0], 1)
        self.layer2 = self._make_layer(nf * 2, num_blocks[1], 2)
        self.layer3 = self._make_layer(nf * 4, num_blocks[2], 2)
        self.layer4 = self._make_layer(nf * 8, num_blocks[3], 2)
        self.classifier = nn.Linear(nf * 8, num_classes)

    def _make_layer(self, planes, n, stride):
        layers = []
        for s in [stride] + [1] * (n - 1):
            layers.append(BasicBlock(self.in_planes, planes, s))
            self.in_planes = planes
        return nn.Sequential(*layers)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer4(self.layer3(self.layer2(self.layer1(out))))
        out = F.avg_pool2d(out, out.shape[2]).view(out.size(0), -1)
        return self.classifier(out)


class Buffer:
    def __init__(self, size):
        self.size = size
        self.seen = 0
        self.examples = torch.zeros(size, 3, 32, 32, device=device)
        self.labels = torch.zeros(size, dtype=torch.long, device=device)
        self.logits = torch.zeros(size, N_CLASSES, device=device)
        self.task_labels = torch.zeros(size, dtype=torch.long, device=device)

    def __len__(self):
        return min(self.seen, self.size)

    def add(self, examples, labels, logits, task):
        src, dst = [], []
        for i in range(examples.shape[0]):
            if self.seen < self.size:
                slot = self.seen
            else:
                slot = int(torch.randint(0, self.seen + 1, (1,), generator=host_gen))
            self.seen += 1
            if slot < self.size:
                src.append(i)
                dst.append(slot)
        if not dst:
            return
        src = torch.tensor(src, device=device)
        dst = torch.tensor(dst, device=device)
        self.examples.index_copy_(0, dst, examples.index_select(0, src))
        self.labels.index_copy_(0, dst, labels.index_select(0, src))
        self.logits.index_copy_(0, dst, logits.index_select(0, src))
        self.task_labels.index_fill_(0, dst, task)

    def sample(self, n):
        idx = torch.randperm(len(self), generator=host_gen)[: min(n, len(self))].to(device)
        return self.examples[idx], self.labels[idx], self.logits[idx]


def stream_batch(task, bs):
    x = torch.rand(bs, 3, 32, 32, device=device)
    y = torch.randint(task * CPT, (task + 1) * CPT, (bs,), device=device)
    return x, y


model = ResNet().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.03)
buffer = Buffer(BUF)
if device == "cuda":
    print(f"model + buffer {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
first = True
for task in range(N_TASKS):
    for _ in range(STEPS_PER_TASK):
        inputs, labels = stream_batch(task, B)
        optimizer.zero_grad()
        outputs = model(inputs)
        loss = F.cross_entropy(outputs, labels)
        if len(buffer) > 0:
            buf_inputs, _, buf_logits = buffer.sample(B)
            loss_mse = ALPHA * F.mse_loss(model(buf_inputs), buf_logits)
            buf_inputs, buf_labels, _ = buffer.sample(B)
            loss_ce = BETA * F.cross_entropy(model(buf_inputs), buf_labels)
            loss = loss + loss_mse + loss_ce
        loss.backward()
        optimizer.step()
        buffer.add(inputs, labels, outputs.data, task)
        if first:
            print(f"first step loss {loss.item():.4f}")
            if device == "cuda":
                print(f"first step peak {torch.cuda.max_memory_allocated()}")
                torch.cuda.reset_peak_memory_stats()
            first = False
    print(f"task {task} loss {loss.item():.4f} buffer {len(buffer)} seen {buffer.seen}")
del inputs, labels, outputs, loss, buf_inputs, buf_labels, buf_logits, loss_mse, loss_ce
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode():
    correct = 0
    for i in range(4):
        x, y = stream_batch(i % N_TASKS, EVAL_B)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"class-il acc {correct / (4 * EVAL_B):.3f}")
del x, y
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- Experience Replay, bf16 autocast, channels_last, AdamW foreach
del model, optimizer
er_model = ResNet().to(device, memory_format=torch.channels_last)
er_opt = torch.optim.AdamW(er_model.parameters(), lr=1e-3, weight_decay=1e-4, foreach=True)
er_model.train()
for step in range(4):
    inputs, labels = stream_batch(N_TASKS - 1, B)
    buf_inputs, buf_labels, _ = buffer.sample(B)
    x = torch.cat([inputs, buf_inputs]).contiguous(memory_format=torch.channels_last)
    y = torch.cat([labels, buf_labels])
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(er_model(x), y)
    er_opt.zero_grad(set_to_none=True)
    loss.backward()
    er_opt.step()
    print(f"er step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"er peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
