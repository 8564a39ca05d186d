"""TRADES after Zhang et al. 2019 ("Theoretically Principled Trade-off between Robustness and
Accuracy") with the yaodongyu/TRADES repository's trades_loss as written there: the attack in eval()
mode from x_natural + 0.001 * randn (drawn on the host, then copied), 10 steps of sign-gradient ascent
on `nn.KLDivLoss(reduction='sum')` between log_softmax(model(x_adv)) and softmax(model(x_natural))
(x_natural's forward rebuilt with its graph every step, `torch.autograd.grad(loss_kl, [x_adv])`),
then in train() the natural cross entropy plus beta (6.0) times the batch-mean KL of the clean and
adversarial logits. The model is torchvision's resnet18 with the CIFAR stem (a 3 x 3 stride-1
conv1, maxpool replaced by Identity, 10 classes); random CIFAR-shaped batches of 256. bf16 autocast,
SGD (lr 0.1, momentum 0.9, weight decay 2e-4); the first step its own phase, then 2 steps; then the
repository's eval_adv_test_whitebox in fp32: natural accuracy of 2 batches of 500 under no_grad
and PGD-20 (step 0.003, random start) on 256 with `loss.backward()` on a `requires_grad=True` input;
then MART (Wang et al. 2020, YisenWang/MART's mart_loss: a cross-entropy PGD-10 attack, the
boosted cross entropy with argsort's second-most-likely class, and the KL weighted by one minus the
true class's clean probability) under bf16 autocast for 2 steps; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17502)
B, EVAL_B, PGD_B = (4, 8, 4) if SMALL else (256, 500, 256)
EPS, STEP, BETA = 0.031, 0.007, 6.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def cifar_resnet18():
    net = torchvision.models.resnet18(num_classes=10)
    net.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    return net


def cifar_batch(bs):
    return torch.rand(bs, 3, 32, 32, device=device), torch.randint(0, 10, (bs,), device=device)


def trades_loss(model, x_natural, y, optimizer, step_size=0.003, epsilon=0.031, perturb_steps=10, beta=1.0):
    criterion_kl = nn.KLDivLoss(reduction="sum")
    model.eval()
    batch_size = len(x_natural)
    x_adv = x_natural.detach() + 0.001 * torch.randn(x_natural.shape).to(device).detach()
    for _ in range(perturb_steps):
        x_adv.requires_grad_()
        with torch.enable_grad():
            loss_kl = criterion_kl(F.log_softmax(model(x_adv), dim=1), F.softmax(model(x_natural), dim=1))
        grad = torch.autograd.grad(loss_kl, [x_adv])[0]
        x_adv = x_adv.detach() + step_size * torch.sign(grad.detach())
        x_adv = torch.min(torch.max(x_adv, x_natural - epsilon), x_natural + epsilon)
        x_adv = torch.clamp(x_adv, 0.0, 1.0)
    model.train()
    x_adv = torch.clamp(x_adv, 0.0, 1.0).detach()
    optimizer.zero_grad()
    logits = model(x_natural)
    loss_natural = F.cross_entropy(logits, y)
    loss_robust = (1.0 / batch_size) * criterion_kl(
        F.log_softmax(model(x_adv), dim=1), F.softmax(model(x_natural), dim=1)
    )
    return loss_natural + beta * loss_robust


def mart_loss(model, x_natural, y, optimizer, step_size=0.007, epsilon=0.031, perturb_steps=10, beta=6.0):
    kl = nn.KLDivLoss(reduction="none")
    model.eval()
    batch_size = len(x_natural)
    x_adv = x_natural.detach() + 0.001 * torch.randn(x_natural.shape).to(device).detach()
    for _ in range(perturb_steps):
        x_adv.requires_grad_()
        with torch.enable_grad():
            loss_ce = F.cross_entropy(model(x_adv), y)
        grad = torch.autograd.grad(loss_ce, [x_adv])[0]
        x_adv = x_adv.detach() + step_size * torch.sign(grad.detach())
        x_adv = torch.min(torch.max(x_adv, x_natural - epsilon), x_natural + epsilon)
        x_adv = torch.clamp(x_adv, 0.0, 1.0)
    model.train()
    x_adv = torch.clamp(x_adv, 0.0, 1.0).detach()
    optimizer.zero_grad()
    logits = model(x_natural)
    logits_adv = model(x_adv)
    adv_probs = F.softmax(logits_adv, dim=1)
    tmp1 = torch.argsort(adv_probs, dim=1)[:, -2:]
    new_y = torch.where(tmp1[:, -1] == y, tmp1[:, -2], tmp1[:, -1])
    loss_adv = F.cross_entropy(logits_adv, y) + F.nll_loss(torch.log(1.0001 - adv_probs + 1e-12), new_y)
    nat_probs = F.softmax(logits, dim=1)
    true_probs = torch.gather(nat_probs, 1, (y.unsqueeze(1)).long()).squeeze()
    loss_robust = (1.0 / batch_size) * torch.sum(
        torch.sum(kl(torch.log(adv_probs + 1e-12), nat_probs), dim=1) * (1.0000001 - true_probs)
    )
    return loss_adv + float(beta) * loss_robust


model = cifar_resnet18().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    model.train()
    data, target = cifar_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = trades_loss(
            model, data, target, optimizer, step_size=STEP, epsilon=EPS, perturb_steps=10, beta=BETA
        )
    loss.backward()
    optimizer.step()
    print(f"trades step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del data, target, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def pgd_whitebox(model, X, y, epsilon=EPS, num_steps=20, step_size=0.003):
    out = model(X)
    err = (out.data.max(1)[1] != y.data).float().sum()
    X_pgd = X.detach().clone()
    random_noise = torch.empty_like(X_pgd).uniform_(-epsilon, epsilon)
    X_pgd = (X_pgd + random_noise).detach().requires_grad_(True)
    for _ in range(num_steps):
        opt = torch.optim.SGD([X_pgd], lr=1e-3)
        opt.zero_grad()
        with torch.enable_grad():
            loss = nn.CrossEntropyLoss()(model(X_pgd), y)
        loss.backward()
        eta = step_size * X_pgd.grad.data.sign()
        X_pgd = X_pgd.data + eta
        eta = torch.clamp(X_pgd.data - X.data, -epsilon, epsilon)
        X_pgd = torch.clamp(X.data + eta, 0, 1.0).detach().requires_grad_(True)
    err_pgd = (model(X_pgd).data.max(1)[1] != y.data).float().sum()
    return err, err_pgd


model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        data, target = cifar_batch(EVAL_B)
        correct += model(data).argmax(1).eq(target).sum().item()
data, target = cifar_batch(PGD_B)
err_natural, err_robust = pgd_whitebox(model, data.requires_grad_(True), target)
print(
    f"natural acc {correct / (2 * EVAL_B):.3f} robust err {err_robust.item()}"
    f" natural err {err_natural.item()}"
)
del data, target
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(2):
    model.train()
    data, target = cifar_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = mart_loss(model, data, target, optimizer)
    loss.backward()
    optimizer.step()
    print(f"mart step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"mart allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
