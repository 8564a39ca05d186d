"""Evidential deep learning, post-hoc calibration and conformal prediction on a timm ConvNeXt-T.

Evidential classification (Sensoy et al. 2018): softplus evidence gives a Dirichlet alpha = e + 1; the loss
is the expected cross-entropy under the Dirichlet (digamma) plus an annealed KL from the misleading-evidence
Dirichlet to the uniform one (lgamma, digamma). Then the logits of a calibration set are cached and a
temperature is fitted with L-BFGS (strong Wolfe line search); split-conformal prediction with adaptive
prediction sets (APS: sorted probabilities, cumulative sums, the true label's rank) gives the conformal
quantile by torch.quantile and the prediction-set sizes on a test set. Finally deep evidential regression
(Amini et al. 2020: a Normal-Inverse-Gamma head, its NLL and evidence regulariser) and a heteroscedastic
Gaussian head (F.gaussian_nll_loss) are trained on the same backbone.

Phases: 3 steps of evidential training under bf16 autocast with fused AdamW at batch 128 x 160; calibration
and conformal prediction (logits of 4,096 calibration and 4,096 test images under no_grad in batches of
512, temperature scaling by L-BFGS, APS scores and sets); evidential + heteroscedastic regression with
timm gradient checkpointing under fp16 autocast with GradScaler and foreach AdamW at batch 192; then
empty_cache() and channels_last bf16 inference_mode at batch 512 returning aleatoric and epistemic variances.
4 phases."""

import math
import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2186)
device = "cuda" if torch.cuda.is_available() else "cpu"
CLASSES = 100
IMG = 64 if SMALL else 160
B_TRAIN, N_CAL, B_CAL, B_REG, B_INF = (4, 16, 8, 4, 8) if SMALL else (128, 4096, 512, 192, 512)
ALPHA_CONF = 0.1


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def dirichlet_kl_to_uniform(alpha):
    k = alpha.shape[-1]
    s = alpha.sum(-1, keepdim=True)
    return (
        torch.lgamma(s).squeeze(-1)
        - math.lgamma(k)
        - torch.lgamma(alpha).sum(-1)
        + ((alpha - 1) * (torch.digamma(alpha) - torch.digamma(s))).sum(-1)
    )


def evidential_loss(logits, y, step, anneal_steps=10):
    alpha = F.softplus(logits.float()) + 1
    s = alpha.sum(-1, keepdim=True)
    onehot = F.one_hot(y, CLASSES).float()
    nll = (onehot * (torch.digamma(s) - torch.digamma(alpha))).sum(-1)
    alpha_tilde = onehot + (1 - onehot) * alpha
    coef = min(1.0, step / anneal_steps)
    return (nll + coef * dirichlet_kl_to_uniform(alpha_tilde)).mean()


model = timm.create_model("convnext_tiny", pretrained=False, num_classes=CLASSES).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05, fused=device == "cuda")
model.train()
for step in range(3):
    x = torch.randn(B_TRAIN, 3, IMG, IMG, device=device)
    y = torch.randint(0, CLASSES, (B_TRAIN,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(x)
    loss = evidential_loss(logits, y, step)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"evidential loss {loss.item():.4f}")
report("evidential convnext bf16 fused adamw")

# calibration: cached logits, temperature scaling by L-BFGS, split conformal APS
model.eval()


def cached_logits(n):
    out, labels = [], []
    with torch.no_grad():
        for i in range(n // B_CAL):
            x = torch.randn(B_CAL, 3, IMG, IMG, device=device)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
                out.append(model(x).float())
            labels.append(torch.randint(0, CLASSES, (B_CAL,), device=device))
    return torch.cat(out), torch.cat(labels)


cal_logits, cal_y = cached_logits(N_CAL)
test_logits, test_y = cached_logits(N_CAL)
log_t = torch.zeros(1, device=device, requires_grad=True)
lbfgs = torch.optim.LBFGS([log_t], lr=0.1, max_iter=50, line_search_fn="strong_wolfe")


def closure():
    lbfgs.zero_grad()
    nll = F.cross_entropy(cal_logits / log_t.exp(), cal_y)
    nll.backward()
    return nll


lbfgs.step(closure)
with torch.no_grad():
    temp = log_t.exp()
    cal_p = (cal_logits / temp).softmax(-1)
    sorted_p, order = cal_p.sort(-1, descending=True)
    cum = sorted_p.cumsum(-1)
    rank = (order == cal_y[:, None]).float().argmax(-1)
    scores = cum.gather(1, rank[:, None]).squeeze(1) - sorted_p.gather(1, rank[:, None]).squeeze(1) * torch.rand(
        N_CAL, device=device
    )
    level = math.ceil((N_CAL + 1) * (1 - ALPHA_CONF)) / N_CAL
    qhat = torch.quantile(scores, min(level, 1.0))
    test_p = (test_logits / temp).softmax(-1)
    t_sorted, t_order = test_p.sort(-1, descending=True)
    t_cum = t_sorted.cumsum(-1)
    in_set = (t_cum - t_sorted) <= qhat
    set_sizes = in_set.sum(-1)
    covered = torch.zeros_like(in_set).scatter_(1, t_order, in_set).gather(1, test_y[:, None]).float().mean()
print(f"temperature {temp.item():.4f} qhat {qhat.item():.4f} mean set size {set_sizes.float().mean().item():.2f}")
print(f"coverage {covered.item():.4f}")
report("temperature scaling lbfgs aps conformal")

# deep evidential regression + heteroscedastic Gaussian heads, checkpointing, fp16 GradScaler
del opt, cal_logits, test_logits, cal_p, test_p, sorted_p, order, cum, t_sorted, t_order, t_cum, in_set
model.train()
model.set_grad_checkpointing(True)
feat_dim = model.num_features
nig_head = nn.Linear(feat_dim, 4).to(device)
gauss_head = nn.Linear(feat_dim, 2).to(device)
params = [*model.parameters(), *nig_head.parameters(), *gauss_head.parameters()]
opt = torch.optim.AdamW(params, lr=2e-4, weight_decay=0.05, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")


def nig_nll(y, gamma, nu, alpha, beta):
    omega = 2 * beta * (1 + nu)
    return (
        0.5 * torch.log(math.pi / nu)
        - alpha * torch.log(omega)
        + (alpha + 0.5) * torch.log(nu * (y - gamma) ** 2 + omega)
        + torch.lgamma(alpha)
        - torch.lgamma(alpha + 0.5)
    )


def regress(x):
    feats = model.forward_head(model.forward_features(x), pre_logits=True)
    gamma, lnu, lalpha, lbeta = nig_head(feats).float().unbind(-1)
    nu, alpha, beta = F.softplus(lnu), F.softplus(lalpha) + 1, F.softplus(lbeta)
    mu, logvar = gauss_head(feats).float().unbind(-1)
    return gamma, nu, alpha, beta, mu, logvar


for step in range(3):
    x = torch.randn(B_REG, 3, IMG, IMG, device=device)
    y = torch.randn(B_REG, device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=device == "cuda"):
        gamma, nu, alpha, beta, mu, logvar = regress(x)
    der = (nig_nll(y, gamma, nu, alpha, beta) + 0.01 * (y - gamma).abs() * (2 * nu + alpha)).mean()
    het = F.gaussian_nll_loss(mu, y, logvar.exp(), full=True)
    loss = der + het
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
print(f"regression loss {loss.item():.4f}")
report("evidential + heteroscedastic regression checkpointing fp16 gradscaler")

# inference: aleatoric and epistemic variances, channels_last bf16
del opt, scaler, loss, gamma, nu, alpha, beta, mu, logvar
if device == "cuda":
    torch.cuda.empty_cache()
model.eval()
model.set_grad_checkpointing(False)
model = model.to(memory_format=torch.channels_last)
with torch.inference_mode():
    x = torch.randn(B_INF, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        gamma, nu, alpha, beta, mu, logvar = regress(x)
    aleatoric = beta / (alpha - 1)
    epistemic = beta / (nu * (alpha - 1))
    print(f"aleatoric {aleatoric.mean().item():.4f} epistemic {epistemic.mean().item():.4f}")
    print(f"gaussian sigma {logvar.exp().sqrt().mean().item():.4f}")
report("channels_last bf16 inference_mode uncertainties")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
