"""A normalizer-free ResNet trained the NFNet way (Brock et al. 2021) under torch.compile: timm's
ECA-NFNet-L0 (`timm.create_model("eca_nfnet_l0", pretrained=False)`: no BatchNorm, every convolution a
`ScaledStdConv2d` that standardizes its weight on each forward by `F.batch_norm` over the flattened
filters, scaled residual branches with skipinit gains, ECA channel attention, SiLU), compiled with
`torch.compile(model, dynamic=False)` (default mode), channels-last, bf16 autocast, adaptive gradient
clipping (`timm.utils.dispatch_clip_grad(..., value=0.01, mode="agc")`: unit-wise gradient norms
against unit-wise weight norms, the final classifier excluded as in the paper) and timm's SGDP
(`create_optimizer_v2(opt="sgdp", momentum=0.9, nesterov=True)`: SGD whose update is projected off
the radial direction of scale-invariant weights). Phase 1: 6 steps at batch 128 x 3 x 224 x 224.
Phase 2: the compiled model in eval at the model's test size 288 (a recompile) under inference_mode,
batch 192, top-1 against random labels. Seeded. 2 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.utils import dispatch_clip_grad

torch.manual_seed(2705)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("eca_nfnet_l0", pretrained=False, num_classes=1000, drop_path_rate=0.1)
model = model.to(dev).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="sgdp", lr=0.2, momentum=0.9, nesterov=True, weight_decay=2e-5)
agc_params = [p for n, p in model.named_parameters() if not n.startswith("head.fc")]
cmodel = torch.compile(model, dynamic=False)
model.train()
for _step in range(6):
    x = torch.randn(128, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (128,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(cmodel(x), y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    dispatch_clip_grad(agc_params, value=0.01, mode="agc")
    optimizer.step()
print("train", _step + 1, round(loss.item(), 3))
report("eca_nfnet_l0_compiled_bf16_channels_last_agc_sgdp_b128_224")

del x, y, loss
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(2):
        x = torch.randn(192, 3, 288, 288, device=dev).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (192,), device=dev)
        correct += (cmodel(x).argmax(-1) == y).sum().item()
print("top1", correct / 384)
report("eca_nfnet_l0_compiled_eval_288_inference_mode_b192")
