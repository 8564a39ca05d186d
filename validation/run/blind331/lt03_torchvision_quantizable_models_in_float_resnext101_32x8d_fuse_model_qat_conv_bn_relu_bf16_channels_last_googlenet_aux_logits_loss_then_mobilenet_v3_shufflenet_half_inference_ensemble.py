"""torchvision's quantizable classification models (`torchvision.models.quantization`) used in float,
as one does before quantization-aware training, without any qconfig: a `QuantizableResNet`
(resnext101_32x8d, `quantize=False`) whose Conv-BN-ReLU triples are fused for QAT with
`fuse_model(is_qat=True)` (torch.ao.nn.intrinsic ConvBnReLU2d / ConvBn2d modules that still run conv +
batch norm + relu in float), trained channels_last under bf16 autocast with SGD momentum and a
linear-warmup LambdaLR; then a `QuantizableGoogLeNet` with its two auxiliary classifiers (aux_logits,
init_weights) trained in fp32 with `loss = main + 0.3 * (aux1 + aux2)` and Adam; then the quantizable
MobileNetV3-Large and ShuffleNetV2 x1.5 (FloatFunctional adds/concats, QuantStub/DeQuantStub as
identities) cast to fp16 with `.half()` for batched inference under inference_mode, and the four
models' softmaxes averaged.

Phases: 0 data; 1 fused resnext101_32x8d training; 2 googlenet aux training; 3 half inference of all four;
4 ensemble."""

import os

import torch
import torch.nn.functional as F
from torchvision.models import quantization as qmodels

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3313)
device = "cuda" if torch.cuda.is_available() else "cpu"
N_CLASSES = 37
if SMALL:
    BS, STEPS, N_TEST, IMG = 4, 2, 8, 96
else:
    BS, STEPS, N_TEST, IMG = 32, 4, 192, 224


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


train_x = torch.randn(BS * STEPS, 3, IMG, IMG)
train_y = torch.randint(0, N_CLASSES, (BS * STEPS,))
test_x = torch.randn(N_TEST, 3, IMG, IMG).to(device)
report("data")

resnet = qmodels.resnext101_32x8d(weights=None, quantize=False, num_classes=N_CLASSES)
resnet.train()
resnet.fuse_model(is_qat=True)
resnet = resnet.to(device, memory_format=torch.channels_last)
opt = torch.optim.SGD(resnet.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / STEPS))
for step in range(STEPS):
    x = train_x[step * BS : (step + 1) * BS].to(device).contiguous(memory_format=torch.channels_last)
    y = train_y[step * BS : (step + 1) * BS].to(device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = F.cross_entropy(resnet(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    sched.step()
del opt, sched
report("resnext101_fused")

googlenet = qmodels.googlenet(weights=None, quantize=False, num_classes=N_CLASSES, aux_logits=True, init_weights=True)
googlenet = googlenet.to(device).train()
opt = torch.optim.Adam(googlenet.parameters(), lr=3e-4)
for step in range(STEPS):
    x = train_x[step * BS : (step + 1) * BS].to(device)
    y = train_y[step * BS : (step + 1) * BS].to(device)
    out, aux2, aux1 = googlenet(x)
    loss = F.cross_entropy(out, y) + 0.3 * (F.cross_entropy(aux1, y) + F.cross_entropy(aux2, y))
    opt.zero_grad()
    loss.backward()
    opt.step()
del opt
report("googlenet_aux")

mnv3 = qmodels.mobilenet_v3_large(weights=None, quantize=False, num_classes=N_CLASSES).to(device)
shuffle = qmodels.shufflenet_v2_x1_5(weights=None, quantize=False, num_classes=N_CLASSES).to(device)
models = [resnet, googlenet, mnv3, shuffle]
probs = torch.zeros(len(models), N_TEST, N_CLASSES, device=device)
with torch.inference_mode():
    for i, m in enumerate(models):
        m.half().eval()
        for s in range(0, N_TEST, BS * 2):
            x = test_x[s : s + BS * 2].half()
            if m is resnet:
                x = x.contiguous(memory_format=torch.channels_last)
            probs[i, s : s + BS * 2] = m(x).float().softmax(-1)
report("half_inference")

ens = probs.mean(0)
conf, pred = ens.max(-1)
pairwise = (probs.argmax(-1)[:, None] == probs.argmax(-1)[None]).float().mean(-1)
n_cls = (torch.bincount(pred, minlength=N_CLASSES) > 0).sum()
print(f"loss {loss.item():.3f} mean conf {conf.mean().item():.4f} classes {n_cls.item()}")
print("pairwise agreement", [round(v, 3) for v in pairwise.flatten().tolist()])
report("ensemble")
