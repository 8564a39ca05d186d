"""Elastic Weight Consolidation (Kirkpatrick et al. 2017) on a class-incremental split of a
100-class problem, two tasks of 50 classes each, written the way continual-learning code does it by
hand: a torchvision resnet18 (random init, num_classes=100, one shared head; logits of the other
task's classes masked to -inf) on 128 x 128 RGB images, batch 256, SGD (lr 0.05, momentum 0.9,
weight decay 5e-4). Task A in fp32: the first step its own phase, then 4 steps. Then the Fisher
information diagonal: the model in eval mode, 8 batches of 64, labels sampled from the model's own
predictive distribution (torch.distributions.Categorical), the per-parameter squared gradients
accumulated into fp32 buffers shaped like the parameters (divided by the number of batches), and a
detached clone of every parameter saved as the anchor. Task B: 5 steps under bf16 autocast with the
same optimizer, the loss the task's cross-entropy plus lambda/2 * sum_i F_i (theta_i - theta*_i)^2
computed in fp32 outside autocast. Then evaluation of both tasks under torch.no_grad, 2 batches of 512 each;
5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18101)
if SMALL:
    B, RES, STEPS_A, STEPS_B, FISHER_N, FISHER_B, EVAL_B = 4, 32, 2, 2, 2, 4, 8
else:
    B, RES, STEPS_A, STEPS_B, FISHER_N, FISHER_B, EVAL_B = 256, 128, 5, 5, 8, 64, 512
N_CLASSES = 100
TASKS = [range(0, 50), range(50, 100)]
EWC_LAMBDA = 400.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def task_batch(task, bs):
    lo, hi = TASKS[task][0], TASKS[task][-1] + 1
    x = torch.randn(bs, 3, RES, RES, device=device)
    y = torch.randint(lo, hi, (bs,), device=device)
    return x, y


def masked_logits(logits, task):
    mask = torch.full((N_CLASSES,), float("-inf"), device=logits.device)
    mask[TASKS[task][0] : TASKS[task][-1] + 1] = 0.0
    return logits + mask


model = torchvision.models.resnet18(num_classes=N_CLASSES).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

# ---- task A
model.train()
for step in range(STEPS_A):
    x, y = task_batch(0, B)
    loss = F.cross_entropy(masked_logits(model(x), 0), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"task A step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, loss
if device == "cuda":
    print(f"task A peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- Fisher diagonal and anchor
model.eval()
fisher = {n: torch.zeros_like(p) for n, p in model.named_parameters() if p.requires_grad}
for _ in range(FISHER_N):
    x, _ = task_batch(0, FISHER_B)
    model.zero_grad()
    log_probs = F.log_softmax(masked_logits(model(x), 0), dim=1)
    sampled = torch.distributions.Categorical(logits=log_probs).sample()
    loss = F.nll_loss(log_probs, sampled)
    loss.backward()
    for n, p in model.named_parameters():
        if p.grad is not None:
            fisher[n] += p.grad.detach() ** 2 / FISHER_N
anchor = {n: p.detach().clone() for n, p in model.named_parameters()}
model.zero_grad(set_to_none=True)
del x, log_probs, sampled, loss
n_fisher = sum(f.numel() for f in fisher.values())
print(f"fisher mean {sum(f.sum().item() for f in fisher.values()) / n_fisher:.3e}")
if device == "cuda":
    print(f"fisher peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def ewc_penalty():
    total = 0.0
    for n, p in model.named_parameters():
        total = total + (fisher[n] * (p - anchor[n]) ** 2).sum()
    return EWC_LAMBDA / 2 * total


# ---- task B with EWC
model.train()
for step in range(STEPS_B):
    x, y = task_batch(1, B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(x)
    ce = F.cross_entropy(masked_logits(logits.float(), 1), y)
    penalty = ewc_penalty()
    loss = ce + penalty
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    print(f"task B step {step} ce {ce.item():.4f} ewc {penalty.item():.4e}")
del x, y, logits, ce, penalty, loss
if device == "cuda":
    print(f"task B peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# ---- evaluation on both tasks
model.eval()
with torch.no_grad():
    for task in range(2):
        correct = 0
        for _ in range(2):
            x, y = task_batch(task, EVAL_B)
            pred = masked_logits(model(x), task).argmax(1)
            correct += (pred == y).sum().item()
        print(f"task {task} acc {correct / (2 * EVAL_B):.3f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
