"""JEM (Grathwohl et al. 2020, "Your Classifier is Secretly an Energy Based Model"), following the
reference train_wrn_ebm.py: a Wide-ResNet-16-4 without normalisation (LeakyReLU 0.2) whose class
logits define p(y|x) and, through logsumexp, an energy -E(x) = logsumexp_y f(x)[y]. Each training step
draws negatives with SGLD: the starting points come from a replay buffer kept on the host (10,000 images,
5% re-initialised from uniform noise by a mask, not by branching), moved to the GPU, wrapped in
``torch.autograd.Variable(..., requires_grad=True)`` and updated 20 times with
``torch.autograd.grad(f(x_k).sum(), [x_k], retain_graph=True)`` and ``x_k.data += lr * grad + std * noise``
with the model in eval mode; the final samples are written back to the host buffer. The loss is the
cross-entropy on labelled images plus the contrastive energy term; all model passes run under bf16
autocast (SGLD updates stay fp32), Adam.

Phases: 0 model, CPU replay buffer and GPU data; 1 JEM training steps (SGLD negatives + p(x) and p(y|x)
terms, bf16 autocast); 2 long SGLD chains for generation (60 steps, 256 samples) from the buffer;
3 accuracy and expected calibration error under no_grad in fp32 at batch 1000; 4 gradient-norm OOD
scores ||d logsumexp f(x) / dx|| for in-distribution and noise images under bf16 autocast."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class WideBasic(nn.Module):
    def __init__(self, in_planes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, padding=1, bias=True)
        self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, stride=stride, padding=1, bias=True)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=True)
            )

    def forward(self, x):
        out = self.conv1(F.leaky_relu(x, 0.2))
        out = self.conv2(F.leaky_relu(out, 0.2))
        return out + self.shortcut(x)


class WideResNet(nn.Module):
    def __init__(self, depth=16, widen_factor=4):
        super().__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * widen_factor, 32 * widen_factor, 64 * widen_factor]
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=True)
        layers, in_planes = [], widths[0]
        for i, stride in zip(range(1, 4), (1, 2, 2), strict=True):
            for j in range(n):
                layers.append(WideBasic(in_planes, widths[i], stride if j == 0 else 1))
                in_planes = widths[i]
        self.layers = nn.Sequential(*layers)
        self.last_dim = widths[3]

    def forward(self, x):
        out = self.layers(self.conv1(x))
        out = F.leaky_relu(out, 0.2)
        return F.adaptive_avg_pool2d(out, 1).flatten(1)


class F_(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.f = WideResNet()
        self.class_output = nn.Linear(self.f.last_dim, n_classes)

    def forward(self, x, y=None):
        logits = self.classify(x)
        if y is None:
            return logits.logsumexp(1)
        return torch.gather(logits, 1, y[:, None])

    def classify(self, x):
        return self.class_output(self.f(x)).squeeze()


batch_size = 128
buffer_size = 10000
reinit_freq = 0.05
sgld_lr, sgld_std, n_steps = 1.0, 0.01, 20

f = F_().to(device)
optim = torch.optim.Adam(f.parameters(), lr=1e-4, betas=(0.9, 0.999), weight_decay=0.0)
replay_buffer = torch.FloatTensor(buffer_size, 3, 32, 32).uniform_(-1, 1)  # stays on the host
x_train = torch.rand(5000, 3, 32, 32, device=device) * 2 - 1
y_train = torch.randint(0, 10, (5000,), device=device)
report("model, host replay buffer and data")


def sample_p_0(bs):
    inds = torch.randint(0, buffer_size, (bs,))
    buffer_samples = replay_buffer[inds]
    random_samples = torch.FloatTensor(bs, 3, 32, 32).uniform_(-1, 1)
    choose_random = (torch.rand(bs) < reinit_freq).float()[:, None, None, None]
    samples = choose_random * random_samples + (1 - choose_random) * buffer_samples
    return samples.to(device), inds


def sample_q(bs, steps):
    f.eval()
    init_sample, buffer_inds = sample_p_0(bs)
    x_k = torch.autograd.Variable(init_sample, requires_grad=True)
    for _ in range(steps):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            energy = f(x_k).sum()
        f_prime = torch.autograd.grad(energy, [x_k], retain_graph=True)[0]
        x_k.data += sgld_lr * f_prime + sgld_std * torch.randn_like(x_k)
    f.train()
    final_samples = x_k.detach()
    replay_buffer[buffer_inds] = final_samples.cpu()
    return final_samples


for it in range(4):
    idx = torch.randint(0, x_train.shape[0], (batch_size,), device=device)
    x_lab, y_lab = x_train[idx], y_train[idx]
    x_lab = x_lab + 0.03 * torch.randn_like(x_lab)
    x_p_d = x_train[torch.randint(0, x_train.shape[0], (batch_size,), device=device)]
    x_q = sample_q(batch_size, n_steps)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        fp_all = f(x_p_d)
        fq_all = f(x_q)
        fp, fq = fp_all.mean(), fq_all.mean()
        l_p_x = -(fp - fq)
        logits = f.classify(x_lab)
        l_p_y_given_x = nn.CrossEntropyLoss()(logits, y_lab)
        loss = l_p_x + l_p_y_given_x
    optim.zero_grad()
    loss.backward()
    optim.step()
    acc = (logits.max(1)[1] == y_lab).float().mean()
    print(f"P(x) | {it} f(x_p_d)={fp.item():.4f} f(x_q)={fq.item():.4f} d={(fp - fq).item():.4f}")
    print(f"P(y|x) {it} loss={l_p_y_given_x.item():.4f} acc={acc.item():.4f}")
del fp_all, fq_all, fp, fq, l_p_x, logits, l_p_y_given_x, loss, x_q
report("JEM training with SGLD negatives")

samples = sample_q(256, 60)
samples_uint8 = ((samples.clamp(-1, 1) + 1) * 127.5).to(torch.uint8).cpu()
print("generated", tuple(samples_uint8.shape))
del samples
report("long SGLD chains")

f.eval()
with torch.no_grad():
    confs, corrects = [], []
    for i in range(0, x_train.shape[0], 1000):
        logits = f.classify(x_train[i : i + 1000])
        probs = F.softmax(logits, 1)
        conf, pred = probs.max(1)
        confs.append(conf)
        corrects.append((pred == y_train[i : i + 1000]).float())
    confs, corrects = torch.cat(confs), torch.cat(corrects)
    bins = torch.linspace(0, 1, 21, device=device)
    bin_ids = torch.bucketize(confs, bins[1:-1])
    counts = torch.bincount(bin_ids, minlength=20).float()
    conf_sum = torch.zeros(20, device=device).scatter_add_(0, bin_ids, confs)
    acc_sum = torch.zeros(20, device=device).scatter_add_(0, bin_ids, corrects)
    ece = ((conf_sum - acc_sum).abs() / confs.numel()).sum()
print("accuracy", corrects.mean().item(), "ECE", ece.item())
report("accuracy and calibration under no_grad")


def grad_norm_score(x):
    x = x.clone().requires_grad_(True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lse = f(x).sum()
    (g,) = torch.autograd.grad(lse, [x])
    return -g.flatten(1).norm(p=2, dim=1)


scores_in = torch.cat([grad_norm_score(x_train[i : i + 500]) for i in range(0, 2000, 500)])
scores_out = torch.cat([grad_norm_score(torch.rand(500, 3, 32, 32, device=device) * 2 - 1) for _ in range(4)])
print("OOD score gap", (scores_in.mean() - scores_out.mean()).item())
report("gradient-norm OOD scores")
