"""Free adversarial training after Shafahi et al. 2019 ("Adversarial Training for Free!") as the
mahyarnajibi/FreeAdversarialTraining repository's main_free.py writes it for ImageNet: torchvision's
resnet50 (1,000 classes) at 160 px crops, batch 128, each minibatch replayed n_repeats = 4 times; one
persistent `global_noise_data` perturbation buffer (zeros, 128 x 3 x 160 x 160) from which every
replay takes `Variable(global_noise_data[0:n], requires_grad=True)`, adds it to the input, clamps in
place and normalizes in place (`in1.sub_(mean).div_(std)` with expanded mean/std), one backward that
fills both the parameters' and the noise's .grad, the noise updated by fgsm (sign, step 4/255) and
clipped to eps 4/255, then the SGD step. bf16 autocast stands in for the repository's apex amp; SGD
(lr 0.1, momentum 0.9, weight decay 1e-4); the first minibatch (4 replays) its own phase, then 2
minibatches. Then "Fast is better than free" (Wong et al. 2020, locuslab/fast_adversarial's
train_fgsm.py) on the same model at 192 px: per-channel uniform random init of delta on normalized
inputs, `delta.requires_grad = True`, one backward for the input gradient, `delta.data = clamp(...)`,
then the training forward and backward, SGD with CyclicLR (momentum cycled), 3 steps; then
evaluation at 224 px of 2 batches of 200 under no_grad with bf16 autocast; 5 phases."""

import os

import torch
import torch.nn as nn
import torchvision
from torch.autograd import Variable

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17503)
if SMALL:
    B, CROP, FAST_CROP, EVAL_CROP, EVAL_B, REPEATS = 2, 32, 48, 64, 4, 2
else:
    B, CROP, FAST_CROP, EVAL_CROP, EVAL_B, REPEATS = 128, 160, 192, 224, 200, 4
CLIP_EPS, FGSM_STEP = 4.0 / 255, 4.0 / 255
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def fgsm(gradz, step_size):
    return step_size * torch.sign(gradz)


def imagenet_batch(bs, crop):
    x = torch.rand(bs, 3, crop, crop, device=device)
    y = torch.randint(0, 1000, (bs,), device=device)
    return x, y


model = torchvision.models.resnet50().to(device)
criterion = nn.CrossEntropyLoss().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
mean = torch.Tensor(MEAN)[:, None, None].expand(3, CROP, CROP).to(device)
std = torch.Tensor(STD)[:, None, None].expand(3, CROP, CROP).to(device)
global_noise_data = torch.zeros([B, 3, CROP, CROP]).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for i in range(3):
    input, target = imagenet_batch(B, CROP)
    for _j in range(REPEATS):
        noise_batch = Variable(global_noise_data[0 : input.size(0)], requires_grad=True).to(device)
        in1 = input + noise_batch
        in1.clamp_(0, 1.0)
        in1.sub_(mean).div_(std)
        with torch.autocast(**amp):
            output = model(in1)
            loss = criterion(output, target)
        prec1 = (output.argmax(1) == target).float().mean() * 100
        optimizer.zero_grad()
        loss.backward()
        pert = fgsm(noise_batch.grad, FGSM_STEP)
        global_noise_data[0 : input.size(0)] += pert.data
        global_noise_data.clamp_(-CLIP_EPS, CLIP_EPS)
        optimizer.step()
    print(f"free minibatch {i} loss {loss.item():.4f} prec1 {prec1.item():.2f}")
    if i == 0 and device == "cuda":
        print(f"minibatch 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del input, target, noise_batch, in1, output, loss, pert
if device == "cuda":
    print(f"free peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

# Fast FGSM with a random start, on normalized inputs (locuslab/fast_adversarial)
mu = torch.tensor(MEAN).view(3, 1, 1).to(device)
sd = torch.tensor(STD).view(3, 1, 1).to(device)
upper_limit, lower_limit = (1 - mu) / sd, (0 - mu) / sd
epsilon = (8 / 255.0) / sd
alpha = (10 / 255.0) / sd


def clamp(X, lower, upper):
    return torch.max(torch.min(X, upper), lower)


opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9, weight_decay=5e-4)
scheduler = torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.0, max_lr=0.2, step_size_up=2, step_size_down=2)
for step in range(3):
    X, y = imagenet_batch(B, FAST_CROP)
    X = (X - mu) / sd
    delta = torch.zeros_like(X).to(device)
    for c in range(len(epsilon)):
        delta[:, c, :, :].uniform_(-epsilon[c][0][0].item(), epsilon[c][0][0].item())
    delta.data = clamp(delta, lower_limit - X, upper_limit - X)
    delta.requires_grad = True
    with torch.autocast(**amp):
        output = model(X + delta[: X.size(0)])
        loss = nn.functional.cross_entropy(output, y)
    loss.backward()
    grad = delta.grad.detach()
    delta.data = clamp(delta + alpha * torch.sign(grad), -epsilon, epsilon)
    delta.data[: X.size(0)] = clamp(delta[: X.size(0)], lower_limit - X, upper_limit - X)
    delta = delta.detach()
    with torch.autocast(**amp):
        output = model(X + delta[: X.size(0)])
        loss = criterion(output, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    scheduler.step()
    print(f"fast fgsm step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.3f}")
del X, y, delta, grad, output, loss
if device == "cuda":
    print(f"fast peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(2):
        x, y = imagenet_batch(EVAL_B, EVAL_CROP)
        with torch.autocast(**amp):
            out = model((x - mu) / sd)
        correct += (out.argmax(1) == y).sum().item()
print(f"eval acc {correct / (2 * EVAL_B):.4f}")
if device == "cuda":
    print(
        f"eval allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
