"""DP-SGD written by hand with torch.func, as the functorch per-sample-gradient tutorial and the
Opacus "grad_sample_mode=functorch" path do it: the CIFAR-10 CNN of the Opacus tutorial with GroupNorm
in place of BatchNorm (conv 3->32->64->128->256, 3x3, GroupNorm(16) + tanh, max pools, then Linear
4096 -> 256 -> 10; about 1.4M parameters), its parameters and buffers taken out with
`dict(model.named_parameters())` and a per-sample loss `functional_call(model, params, x[None])`
differentiated by `vmap(grad(loss_fn), in_dims=(None, None, 0, 0))` over a batch of 512 fp32 32 x 32
images made on the device: per-sample gradients stacked to (512, *p.shape), their per-sample L2 norms
over all parameters (`torch.stack([g.flatten(1).norm(2, dim=1) ...]).norm(2, dim=0)`), clip factors
`(C / (norm + 1e-6)).clamp(max=1)`, the clipped sum by einsum("i,i...->...") plus Gaussian noise of
std sigma*C from torch.normal on the device, divided by the batch, written to `p.grad`; SGD momentum 0.9
(lr 0.25 as De et al.). The first step its own phase, then 4 steps; evaluation of 4 batches of 2,048
under no_grad (accuracy); then a text classifier (nn.Embedding(8,000 x 128) mean-pooled over 64
tokens, two Linear layers of 256, 4 classes) trained the same way with vmap(grad) under bf16 autocast
(per-sample embedding gradients dense: 8,000 x 128 per sample), batch 256, Adam (lr 1e-3), 3 steps;
4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18201)
if SMALL:
    B, STEPS, EVAL_B, EVAL_N, TB, VOCAB = 8, 2, 16, 1, 4, 500
else:
    B, STEPS, EVAL_B, EVAL_N, TB, VOCAB = 512, 5, 2048, 4, 256, 8000
MAX_GRAD_NORM = 1.0
NOISE_MULTIPLIER = 1.1
device = "cuda" if torch.cuda.is_available() else "cpu"


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1),
            nn.GroupNorm(16, 32),
            nn.Tanh(),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.GroupNorm(16, 64),
            nn.Tanh(),
            nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1),
            nn.GroupNorm(16, 128),
            nn.Tanh(),
            nn.MaxPool2d(2),
            nn.Conv2d(128, 256, 3, padding=1),
            nn.GroupNorm(16, 256),
            nn.Tanh(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(256 * 4 * 4, 256), nn.Tanh(), nn.Linear(256, 10)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class TextClassifier(nn.Module):
    def __init__(self, vocab, dim=128, hidden=256, classes=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, classes)

    def forward(self, tokens):
        h = self.emb(tokens).mean(dim=1)
        h = F.gelu(self.fc1(h))
        h = F.gelu(self.fc2(h))
        return self.out(h)


def make_loss_fn(model):
    def loss_fn(params, buffers, x, y):
        logits = functional_call(model, (params, buffers), (x.unsqueeze(0),))
        return F.cross_entropy(logits.float(), y.unsqueeze(0))

    return loss_fn


def dp_step(model, optimizer, per_sample_grad_fn, x, y, autocast_dtype=None):
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    with torch.autocast(
        "cuda", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None and device == "cuda"
    ):
        grads = per_sample_grad_fn(params, buffers, x, y)
    norms = torch.stack([g.flatten(1).norm(2, dim=1) for g in grads.values()]).norm(2, dim=0)
    factors = (MAX_GRAD_NORM / (norms + 1e-6)).clamp(max=1.0)
    bs = x.shape[0]
    for name, p in model.named_parameters():
        clipped = torch.einsum("i,i...->...", factors, grads[name])
        noise = torch.normal(0.0, NOISE_MULTIPLIER * MAX_GRAD_NORM, size=p.shape, device=p.device)
        p.grad = (clipped + noise) / bs
    del grads
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norms


model = ConvNet().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.SGD(model.parameters(), lr=0.25, momentum=0.9)
psg = vmap(grad(make_loss_fn(model)), in_dims=(None, None, 0, 0))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    x = torch.randn(B, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (B,), device=device)
    norms = dp_step(model, optimizer, psg, x, y)
    print(
        f"step {step} median per-sample norm {norms.median().item():.4f}"
        f" clipped {(norms > MAX_GRAD_NORM).float().mean().item():.3f}"
    )
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, y, norms
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(EVAL_N):
        x = torch.randn(EVAL_B, 3, 32, 32, device=device)
        y = torch.randint(0, 10, (EVAL_B,), device=device)
        correct += (model(x).argmax(1) == y).sum().item()
print(f"eval acc {correct / (EVAL_N * EVAL_B):.4f}")
del x, y
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer, psg
text = TextClassifier(VOCAB).to(device)
text_opt = torch.optim.Adam(text.parameters(), lr=1e-3)
text_psg = vmap(grad(make_loss_fn(text)), in_dims=(None, None, 0, 0))
text.train()
for step in range(3):
    tokens = torch.randint(0, VOCAB, (TB, 64), device=device)
    labels = torch.randint(0, 4, (TB,), device=device)
    norms = dp_step(text, text_opt, text_psg, tokens, labels, autocast_dtype=torch.bfloat16)
    print(f"text step {step} mean per-sample norm {norms.mean().item():.4f}")
if device == "cuda":
    print(
        f"text allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
