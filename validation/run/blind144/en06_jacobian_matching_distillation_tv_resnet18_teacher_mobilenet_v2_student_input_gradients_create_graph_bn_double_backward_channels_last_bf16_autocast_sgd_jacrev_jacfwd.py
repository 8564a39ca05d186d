"""Knowledge distillation with Jacobian matching (Srinivas and Fleuret, "Knowledge Transfer with
Jacobian Matching"): a torchvision ResNet-18 teacher (100 classes, frozen, eval mode) and a
torchvision MobileNetV2 student at width 0.75 (BatchNorm in training mode, ReLU6, inverted residuals),
both channels-last, images of 96 x 96 under bf16 autocast; each step takes the teacher's input
gradient of its logit at the label (torch.autograd.grad, no graph kept), the student's with
create_graph=True, and adds the squared distance of the two L2-normalised input Jacobians to the
cross-entropy and the temperature-4 KL distillation loss, so the backward goes through the
student's input gradient (double backward through depthwise and pointwise convolutions, batch
norm and ReLU6's hardtanh); SGD with Nesterov momentum and gradient-norm clipping at 5, batch 96,
3 steps; then in eval mode the full input Jacobian of the student's 100 logits for 8 images by vmap(jacrev) through
torch.func.functional_call, and the Jacobian of the classifier head with respect to the pooled
1,280-d features by vmap(jacfwd), in fp32; 5 phases."""

import os

import torch
import torch.nn.functional as F
import torchvision
from torch.func import functional_call, jacfwd, jacrev, vmap

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14406)
B, HW, NJ, STEPS = (4, 32, 2, 2) if SMALL else (96, 96, 8, 3)
CLASSES, T, ALPHA, BETA = 100, 4.0, 0.9, 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")

teacher = (
    torchvision.models.resnet18(num_classes=CLASSES).to(device, memory_format=torch.channels_last).eval()
)
for p in teacher.parameters():
    p.requires_grad_(False)
student = torchvision.models.mobilenet_v2(num_classes=CLASSES, width_mult=0.75).to(
    device, memory_format=torch.channels_last
)
opt = torch.optim.SGD(student.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=4e-5)
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def input_jacobian(model, x, y, create_graph):
    x = x.detach().requires_grad_(True)
    with torch.autocast(**amp):
        logits = model(x)
    picked = logits.float().gather(1, y[:, None]).sum()
    (g,) = torch.autograd.grad(picked, x, create_graph=create_graph)
    return logits, g


for step in range(STEPS):
    x = torch.randn(B, 3, HW, HW, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (B,), device=device)
    t_logits, t_jac = input_jacobian(teacher, x, y, create_graph=False)
    s_logits, s_jac = input_jacobian(student, x, y, create_graph=True)
    ce = F.cross_entropy(s_logits.float(), y)
    kd = (
        F.kl_div(
            F.log_softmax(s_logits.float() / T, 1),
            F.softmax(t_logits.detach().float() / T, 1),
            reduction="batchmean",
        )
        * T
        * T
    )
    jm = (F.normalize(s_jac.flatten(1), dim=1) - F.normalize(t_jac.flatten(1), dim=1)).pow(2).sum(1).mean()
    loss = (1 - ALPHA) * ce + ALPHA * kd + BETA * jm
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 5.0)
    opt.step()
    if device == "cuda" and step in (0, STEPS - 1):
        print(
            f"step {step} ce {ce.item():.3f} kd {kd.item():.3f} jm {jm.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del x, t_logits, t_jac, s_logits, s_jac, ce, kd, jm, loss

student.eval()
params = {k: v.detach() for k, v in student.named_parameters()}
buffers = dict(student.named_buffers())


def logits_of(xi):
    return functional_call(student, (params, buffers), (xi.unsqueeze(0),)).squeeze(0)


xj = torch.randn(NJ, 3, HW, HW, device=device)
jac = vmap(jacrev(logits_of))(xj)
saliency = jac.abs().amax(dim=2)
if device == "cuda":
    print(
        f"input jacobian {tuple(jac.shape)} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del jac

with torch.no_grad():
    feats = F.adaptive_avg_pool2d(student.features(torch.randn(B, 3, HW, HW, device=device)), 1).flatten(1)
head = student.classifier
head_params = {k: v.detach() for k, v in head.named_parameters()}


def head_of(f):
    return functional_call(head, head_params, (f.unsqueeze(0),)).squeeze(0)


head_jac = vmap(jacfwd(head_of))(feats)
sv = torch.linalg.svdvals(head_jac)
if device == "cuda":
    print(
        f"head jacobian {tuple(head_jac.shape)} top sv {sv[:, 0].mean().item():.3f} saliency {saliency.mean().item():.3e}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
