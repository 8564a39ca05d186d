"""Forward-gradient training ("Gradients without Backpropagation", Baydin et al. 2022) of an MLP classifier
with `torch.autograd.forward_ad`, then curvature diagnostics with `torch.autograd.functional` (fp32,
synthetic data).
Phase 1, forward-gradient SGD: for each step and each of 2 random tangents, every parameter is made a dual
tensor (`fwAD.make_dual(p.detach(), v)` inside `fwAD.dual_level()`), the loss is computed through
`torch.func.functional_call` with the dual parameters, `fwAD.unpack_dual(loss).tangent` gives the directional
derivative, and `(jvp * v)` averaged over the tangents is written into `p.grad` for `torch.optim.SGD`
(momentum); 8 steps at batch 4,096.
Phase 2, a backprop check: one ordinary `loss.backward()` and the cosine similarity of the true gradient with
8 forward-gradient estimates (flattened with `torch.cat`).
Phase 3, Hessian power iteration on the head's parameters: `torch.autograd.functional.hvp` (double backward
through the loss with the trunk's features fixed) for 12 iterations, then one `vhp` and
`torch.autograd.functional.vjp` at the top eigenvector.
Phase 4, input-output Jacobians: `torch.autograd.functional.jacobian(..., vectorize=True,
strategy="forward-mode")` and reverse mode on 4 samples, then `torch.autograd.functional.hessian` of a small
bilinear form's loss and `torch.autograd.functional.jvp`.
4 phases."""

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch import nn
from torch.autograd import functional as AF
from torch.func import functional_call

torch.manual_seed(2931)
dev = "cuda"
D_IN, H, C, B = 784, 3072, 10, 4096


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = nn.Sequential(
    nn.Linear(D_IN, H), nn.GELU(), nn.Linear(H, H), nn.GELU(), nn.LayerNorm(H), nn.Linear(H, C)
).to(dev)  # fmt: skip
proto = torch.randn(C, D_IN, device=dev)


def batch(n):
    y = torch.randint(0, C, (n,), device=dev)
    x = proto[y] + 0.8 * torch.randn(n, D_IN, device=dev)
    return x, y


def forward_gradient(x, y, k=2):
    """Unbiased gradient estimates (jvp * v) averaged over k random tangents, as dicts by name."""
    names = [n for n, _ in model.named_parameters()]
    est = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    losses = []
    for _ in range(k):
        tangents = {n: torch.randn_like(p) for n, p in model.named_parameters()}
        with fwAD.dual_level():
            dual = {n: fwAD.make_dual(p.detach(), tangents[n]) for n, p in model.named_parameters()}
            loss = F.cross_entropy(functional_call(model, dual, (x,)), y)
            primal, jvp = fwAD.unpack_dual(loss)
            losses.append(primal.item())
            for n in names:
                est[n].add_(tangents[n], alpha=jvp.item() / k)
        del tangents, dual, loss, primal, jvp
    return est, sum(losses) / k


# --- phase 1: forward-gradient SGD ------------------------------------------------------------------------
opt = torch.optim.SGD(model.parameters(), lr=2e-4, momentum=0.9)
for step in range(8):
    x, y = batch(B)
    est, loss = forward_gradient(x, y)
    for n, p in model.named_parameters():
        p.grad = est[n]
    opt.step()
    opt.zero_grad(set_to_none=True)
    del est
    print("step", step, "loss", round(loss, 4))
del x, y
report("forward_gradient_sgd")

# --- phase 2: cosine similarity with the backprop gradient ------------------------------------------------
x, y = batch(B)
loss = F.cross_entropy(model(x), y)
loss.backward()
true_g = torch.cat([p.grad.flatten() for p in model.parameters()])
opt.zero_grad(set_to_none=True)
cos = []
for _ in range(8):
    est, _ = forward_gradient(x, y, k=1)
    g = torch.cat([est[n].flatten() for n, _ in model.named_parameters()])
    cos.append(F.cosine_similarity(g, true_g, dim=0).item())
    del est, g
print("cosine(forward grad, true grad)", [round(c, 4) for c in cos])
del loss, true_g
report("backprop_cosine_check")

# --- phase 3: Hessian power iteration on the head with autograd.functional.hvp ----------------------------
with torch.no_grad():
    feats = model[:5](x)  # (B, H) fixed trunk features
head_w, head_b = model[5].weight.detach(), model[5].bias.detach()


def make_head_loss(feats, y):
    def head_loss(w, b):
        return F.cross_entropy(F.linear(feats, w, b), y)

    return head_loss


head_loss = make_head_loss(feats, y)


v = (torch.randn_like(head_w), torch.randn_like(head_b))
norm = torch.sqrt(sum((t * t).sum() for t in v))
v = tuple(t / norm for t in v)
eig = 0.0
for _ in range(12):
    _, hv = AF.hvp(head_loss, (head_w, head_b), v)
    eig = sum((a * b).sum() for a, b in zip(hv, v, strict=True)).item()
    norm = torch.sqrt(sum((t * t).sum() for t in hv))
    v = tuple(t / norm for t in hv)
    del hv
print("top head Hessian eigenvalue", round(eig, 5))
_, vh = AF.vhp(head_loss, (head_w, head_b), v)
_, vj = AF.vjp(
    lambda w, b, f=feats: F.linear(f, w, b).softmax(-1), (head_w, head_b), torch.ones(B, C, device=dev) / C
)
print("vhp norm", round(torch.sqrt(sum((t * t).sum() for t in vh)).item(), 5), "vjp", tuple(vj[0].shape))
del vh, vj, v, norm, feats
report("autograd_functional_hvp_power_iteration")

# --- phase 4: input-output Jacobians, a Hessian, jvp ------------------------------------------------------
model.eval()
xs = x[:4].clone()
del x, y


def logits_of(inp):
    return model(inp)


jac_f = AF.jacobian(logits_of, xs, vectorize=True, strategy="forward-mode")  # (4, C, 4, D_IN)
jac_r = AF.jacobian(logits_of, xs, vectorize=True)
print("jacobian", tuple(jac_f.shape), "max diff", round((jac_f - jac_r).abs().max().item(), 6))
per_sample = torch.einsum("icid->icd", jac_f)
print("input-gradient norm per class", [round(t, 3) for t in per_sample.norm(dim=-1).mean(0).tolist()])
del jac_f, jac_r, per_sample
A = torch.randn(48, 48, device=dev)
z = torch.randn(256, 48, device=dev)


def bilinear_loss(m):
    return torch.logsumexp((z @ m) @ (A @ z.T), dim=1).mean()


hess = AF.hessian(bilinear_loss, torch.eye(48, device=dev) * 0.1, vectorize=True)  # (48, 48, 48, 48)
print("hessian", tuple(hess.shape), "trace", round(hess.reshape(48 * 48, 48 * 48).diagonal().sum().item(), 4))
_, jv = AF.jvp(logits_of, xs, torch.randn_like(xs))
print("jvp", tuple(jv.shape))
del hess, jv
report("jacobians_hessian_jvp")
