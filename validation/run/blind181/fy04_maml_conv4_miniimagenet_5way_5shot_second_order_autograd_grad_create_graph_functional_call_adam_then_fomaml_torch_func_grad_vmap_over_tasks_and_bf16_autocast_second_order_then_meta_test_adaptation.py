"""MAML (Finn et al. 2017) on the Conv-4 backbone for miniImageNet-style 5-way 5-shot episodes
(15 queries per class, 84 x 84 RGB), written with torch.func.functional_call over a parameter dict:
four blocks of Conv2d(64, 3 x 3) + BatchNorm2d(track_running_stats=False, so batch statistics as
MAML's transductive BN) + ReLU + MaxPool2d(2), a Linear(1600, 5) head. Second-order MAML: 5 inner
SGD steps (lr 0.01) on the support set, each by torch.autograd.grad(create_graph=True), the query
loss of the adapted parameters backpropagated through the inner loop, a meta-batch of 4 tasks
looped with the loss divided by 4 and backward per task, Adam (lr 1e-3) as the outer optimizer,
fp32; the first meta step its own phase then 2 more. Then first-order MAML the torch.func way:
torch.func.grad for the inner steps and the query gradient at the adapted parameters, vmapped over a
meta-batch of 8 tasks (in_dims None for the parameters), the mean of the per-task gradients
assigned to .grad, 2 meta steps. Then second-order MAML again with the forward under bf16 autocast
at a meta-batch of 4, 2 meta steps. Then meta-test: 4 tasks adapted for 10 steps without
create_graph, the query predictions under torch.no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18104)
if SMALL:
    RES, HIDDEN, QUERY, META_B, FO_META_B, INNER = 28, 8, 2, 2, 2, 2
else:
    RES, HIDDEN, QUERY, META_B, FO_META_B, INNER = 84, 64, 15, 4, 8, 5
WAYS, SHOTS = 5, 5
INNER_LR = 0.01
device = "cuda" if torch.cuda.is_available() else "cpu"


def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1),
        nn.BatchNorm2d(cout, track_running_stats=False),
        nn.ReLU(),
        nn.MaxPool2d(2),
    )


class Conv4(nn.Module):
    def __init__(self, ways, hidden):
        super().__init__()
        self.features = nn.Sequential(
            conv_block(3, hidden),
            conv_block(hidden, hidden),
            conv_block(hidden, hidden),
            conv_block(hidden, hidden),
        )
        side = RES // 16
        self.classifier = nn.Linear(hidden * side * side, ways)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def episode(n_tasks):
    xs = torch.randn(n_tasks, WAYS * SHOTS, 3, RES, RES, device=device)
    ys = torch.arange(WAYS, device=device).repeat_interleave(SHOTS).expand(n_tasks, -1).contiguous()
    xq = torch.randn(n_tasks, WAYS * QUERY, 3, RES, RES, device=device)
    yq = torch.arange(WAYS, device=device).repeat_interleave(QUERY).expand(n_tasks, -1).contiguous()
    return xs, ys, xq, yq


model = Conv4(WAYS, HIDDEN).to(device)
meta_opt = torch.optim.Adam(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def adapt(params, x, y, steps, create_graph, autocast=False):
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
            logits = functional_call(model, params, (x,))
        loss = F.cross_entropy(logits.float(), y)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=create_graph)
        params = {n: p - INNER_LR * g for (n, p), g in zip(params.items(), grads, strict=True)}
    return params


def maml_step(meta_batch, autocast=False):
    xs, ys, xq, yq = episode(meta_batch)
    meta_opt.zero_grad()
    total, correct = 0.0, 0
    for t in range(meta_batch):
        params = dict(model.named_parameters())
        adapted = adapt(params, xs[t], ys[t], INNER, create_graph=True, autocast=autocast)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast and device == "cuda"):
            logits = functional_call(model, adapted, (xq[t],))
        loss = F.cross_entropy(logits.float(), yq[t]) / meta_batch
        loss.backward()
        total += loss.item()
        correct += (logits.argmax(1) == yq[t]).sum().item()
    meta_opt.step()
    return total, correct / (meta_batch * WAYS * QUERY)


model.train()
for step in range(3):
    loss, acc = maml_step(META_B)
    print(f"maml step {step} query loss {loss:.4f} acc {acc:.3f}")
    if step == 0 and device == "cuda":
        print(f"first meta step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    print(f"maml peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


# ---- first-order MAML with torch.func, vmapped over tasks
def task_loss(params, x, y):
    return F.cross_entropy(functional_call(model, params, (x,)), y)


def fomaml_task(params, xs, ys, xq, yq):
    for _ in range(INNER):
        g = grad(task_loss)(params, xs, ys)
        params = {n: p - INNER_LR * g[n] for n, p in params.items()}
    return grad(task_loss)(params, xq, yq)


for step in range(2):
    xs, ys, xq, yq = episode(FO_META_B)
    detached = {n: p.detach() for n, p in model.named_parameters()}
    task_grads = vmap(fomaml_task, in_dims=(None, 0, 0, 0, 0))(detached, xs, ys, xq, yq)
    for n, p in model.named_parameters():
        p.grad = task_grads[n].mean(0)
    meta_opt.step()
    meta_opt.zero_grad(set_to_none=True)
    print(
        f"fomaml step {step} grad norm {sum(g.pow(2).sum() for g in task_grads.values()).sqrt().item():.4f}"
    )
del xs, ys, xq, yq, detached, task_grads
if device == "cuda":
    print(f"fomaml peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- second-order MAML under bf16 autocast
for step in range(2):
    loss, acc = maml_step(META_B, autocast=True)
    print(f"bf16 maml step {step} query loss {loss:.4f} acc {acc:.3f}")
if device == "cuda":
    print(f"bf16 maml peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- meta-test
accs = []
xs, ys, xq, yq = episode(4)
for t in range(4):
    adapted = adapt(dict(model.named_parameters()), xs[t], ys[t], 10, create_graph=False)
    with torch.no_grad():
        accs.append((functional_call(model, adapted, (xq[t],)).argmax(1) == yq[t]).float().mean().item())
print(f"meta-test acc {sum(accs) / len(accs):.3f}")
if device == "cuda":
    print(f"meta-test peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
