"""Hypernetworks: networks that generate the weights of a target network.

Part 1, a static hypernetwork (Ha et al. 2016): a 4-stage CNN on random 3 x 64 x 64 images whose 3x3 conv
kernels are not parameters but generated, block by block of 32 x 32 x 3 x 3, from learned 64-d layer
embeddings through a shared two-layer hypernetwork (z -> 32 x 64 -> 32 x 32 x 9); the target network runs
by F.conv2d on the generated weights, with BatchNorm and a residual in each stage, fp32 Adam at batch 256.

Part 2, a task-conditioned hypernetwork for continual learning (von Oswald et al. 2020): a hypernetwork
MLP maps a learned task embedding (and chunk embeddings, 32 chunks) to the 2.4 M weights of a target
MLP 1024 -> 1024 -> 1024 -> 10 whose parameters are swapped in by torch.func.functional_call; the loss of
the current task plus the output regulariser (the hypernetwork's outputs for the 3 previous task
embeddings kept near their detached targets recorded before the task) at batch 512.

Phases: 3 steps of the static hypernet CNN (fp32, Adam); evaluation of the static hypernet under no_grad at
batch 1024; 4 tasks x 2 steps of the task-conditioned hypernetwork in fp32 with Adam; then a no_grad
evaluation over the 4 tasks, empty_cache(), and 3 steps of the static hypernet CNN at batch 512 under
bf16 autocast with fused AdamW. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2213)
device = "cuda" if torch.cuda.is_available() else "cpu"
BLOCK, Z = 32, 64
WIDTHS = (32, 64, 128, 256) if SMALL else (64, 128, 256, 512)
BATCH, EVAL_BATCH, BF16_BATCH = (4, 8, 4) if SMALL else (256, 1024, 512)
TASK_BATCH, TASKS, CHUNKS = (16, 4, 32) if SMALL else (512, 4, 32)
HIDDEN = 256 if SMALL else 1024


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class HyperNetwork(nn.Module):
    """z [n, Z] -> kernels [n, BLOCK, BLOCK, 3, 3] (Ha et al.'s two-layer factorisation)."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(Z, BLOCK * Z) * 0.02)
        self.b1 = nn.Parameter(torch.zeros(BLOCK * Z))
        self.w2 = nn.Parameter(torch.randn(Z, BLOCK * 9) * 0.02)
        self.b2 = nn.Parameter(torch.zeros(BLOCK * 9))

    def forward(self, z):
        a = (z @ self.w1 + self.b1).view(-1, BLOCK, Z)
        k = a @ self.w2 + self.b2
        return k.view(-1, BLOCK, BLOCK, 3, 3)


class HyperConv(nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.n_out, self.n_in = c_out // BLOCK, c_in // BLOCK
        self.z = nn.Parameter(torch.randn(self.n_out * self.n_in, Z) * 0.1)

    def weight(self, hyper):
        k = hyper(self.z).view(self.n_out, self.n_in, BLOCK, BLOCK, 3, 3)
        return k.permute(0, 2, 1, 3, 4, 5).reshape(self.n_out * BLOCK, self.n_in * BLOCK, 3, 3)


class HyperCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.hyper = HyperNetwork()
        self.stem = nn.Conv2d(3, WIDTHS[0], 3, padding=1, bias=False)
        self.convs_a = nn.ModuleList()
        self.convs_b = nn.ModuleList()
        self.bns_a = nn.ModuleList()
        self.bns_b = nn.ModuleList()
        c_prev = WIDTHS[0]
        for c in WIDTHS:
            self.convs_a.append(HyperConv(c_prev, c))
            self.convs_b.append(HyperConv(c, c))
            self.bns_a.append(nn.BatchNorm2d(c))
            self.bns_b.append(nn.BatchNorm2d(c))
            c_prev = c
        self.head = nn.Linear(WIDTHS[-1], 100)

    def forward(self, x):
        x = F.relu(self.stem(x))
        for i, (ca, cb, ba, bb) in enumerate(zip(self.convs_a, self.convs_b, self.bns_a, self.bns_b)):
            stride = 1 if i == 0 else 2
            h = F.relu(ba(F.conv2d(x, ca.weight(self.hyper), stride=stride, padding=1)))
            h = bb(F.conv2d(h, cb.weight(self.hyper), padding=1))
            x = F.relu(
                h
                + (
                    x
                    if stride == 1 and x.shape[1] == h.shape[1]
                    else F.avg_pool2d(x, stride).repeat(1, h.shape[1] // x.shape[1], 1, 1)
                )
            )
        return self.head(x.mean((2, 3)))


net = HyperCNN().to(device)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(BATCH, 3, 64, 64, device=device)
    y = torch.randint(0, 100, (BATCH,), device=device)
    loss = F.cross_entropy(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"static hypernet loss {loss.item():.4f}")
report("static hypernet cnn fp32 adam")

net.eval()
with torch.no_grad():
    x = torch.randn(EVAL_BATCH, 3, 64, 64, device=device)
    pred = net(x).argmax(1)
print(f"eval predictions {pred[:8].tolist()}")
report("static hypernet no_grad eval")
net.train()


# task-conditioned hypernetwork generating a whole target MLP
target = nn.Sequential(
    nn.Linear(1024, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, 10)
).to(device)
shapes = {n: p.shape for n, p in target.named_parameters()}
n_target = sum(s.numel() for s in shapes.values())
chunk = -(-n_target // CHUNKS)


class TaskHyperNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.task_emb = nn.Parameter(torch.randn(TASKS, 32) * 0.1)
        self.chunk_emb = nn.Parameter(torch.randn(CHUNKS, 32) * 0.1)
        self.mlp = nn.Sequential(
            nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, chunk)
        )

    def forward(self, task):
        e = torch.cat([self.task_emb[task].expand(CHUNKS, -1), self.chunk_emb], dim=1)
        return self.mlp(e).flatten()[:n_target] * 0.05

    def params(self, task):
        flat, out = self(task), {}
        offset = 0
        for n, s in shapes.items():
            out[n] = flat[offset : offset + s.numel()].view(s)
            offset += s.numel()
        return out


hnet = TaskHyperNet().to(device)
opt_h = torch.optim.Adam(hnet.parameters(), lr=1e-3)
task_means = torch.randn(TASKS, 1024, device=device)
BETA = 0.01
for task in range(TASKS):
    targets = [hnet(t).detach() for t in range(task)]
    for step in range(2):
        x = torch.randn(TASK_BATCH, 1024, device=device) + task_means[task]
        y = torch.randint(0, 10, (TASK_BATCH,), device=device)
        loss = F.cross_entropy(functional_call(target, hnet.params(task), (x,)), y)
        reg = sum((hnet(t) - targets[t]).square().sum() for t in range(task))
        opt_h.zero_grad(set_to_none=True)
        (loss + BETA * reg).backward()
        opt_h.step()
    del targets
print(f"task-conditioned loss {loss.item():.4f}")
report("task-conditioned hypernet functional_call adam")

with torch.no_grad():
    accs = []
    for task in range(TASKS):
        x = torch.randn(4 * TASK_BATCH, 1024, device=device) + task_means[task]
        y = torch.randint(0, 10, (4 * TASK_BATCH,), device=device)
        accs.append((functional_call(target, hnet.params(task), (x,)).argmax(1) == y).float().mean().item())
print(f"per-task acc {[round(a, 3) for a in accs]}")
del opt, opt_h, hnet
if device == "cuda":
    torch.cuda.empty_cache()
report("task eval then empty_cache")

opt = torch.optim.AdamW(net.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
for step in range(3):
    x = torch.randn(BF16_BATCH, 3, 64, 64, device=device)
    y = torch.randint(0, 100, (BF16_BATCH,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(net(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"bf16 static hypernet loss {loss.item():.4f}")
report("static hypernet bf16 autocast fused adamw")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
