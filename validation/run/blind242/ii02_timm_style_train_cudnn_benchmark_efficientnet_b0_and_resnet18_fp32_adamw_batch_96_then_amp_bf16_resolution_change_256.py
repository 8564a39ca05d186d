"""What timm's train.py does to cuDNN (`torch.backends.cudnn.benchmark = True` at start-up), on two of its
models: EfficientNet-B0 (depthwise and pointwise convolutions, SiLU, squeeze-excite) trained in fp32 with
AdamW at batch 96 x 224, two steps; then ResNet-18 in fp32 at batch 96 x 224, two steps; then
EfficientNet-B0 again under bf16 autocast at 256 x 256 (a resolution change: every problem is new and is
timed again).

No value-dependent sizes. 4 phases."""

import timm
import torch
import torch.nn.functional as F

torch.backends.cudnn.benchmark = True
torch.manual_seed(2422)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def train(model, opt, size, steps, amp):
    for _ in range(steps):
        x = torch.randn(96, 3, size, size, device="cuda")
        y = torch.randint(0, 1000, (96,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        del x, y, loss


eff = timm.create_model("efficientnet_b0", pretrained=False).cuda()
opt_eff = torch.optim.AdamW(eff.parameters(), lr=1e-3, weight_decay=0.05)
report("setup")

train(eff, opt_eff, 224, 2, amp=False)
report("efficientnet_b0_fp32_224")

r18 = timm.create_model("resnet18", pretrained=False).cuda()
opt_r18 = torch.optim.AdamW(r18.parameters(), lr=1e-3, weight_decay=0.05)
train(r18, opt_r18, 224, 2, amp=False)
del r18, opt_r18
report("resnet18_fp32_224")

train(eff, opt_eff, 256, 2, amp=True)
report("efficientnet_b0_bf16_256")
