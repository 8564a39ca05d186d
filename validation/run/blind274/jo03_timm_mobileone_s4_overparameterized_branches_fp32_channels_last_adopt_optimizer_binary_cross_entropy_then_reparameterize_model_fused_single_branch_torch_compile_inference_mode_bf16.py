"""Apple's MobileOne recipe in timm, train-time over-parameterization then deployment: MobileOne-S4
(`timm.create_model("mobileone_s4", pretrained=False)`: every block a sum of k=4 parallel conv-BN
branches plus scale and identity branches, squeeze-excitation in the last stages) trained in fp32,
channels-last, with the ADOPT optimizer from `timm.optim.create_optimizer_v2(model, opt="adopt",
lr=2e-3, weight_decay=0.05)` (the second moment updated after the normalized step, clipped by
step**0.25) and timm's `BinaryCrossEntropy(smoothing=0.1)` (the ResNet-strikes-back loss on one-hot
targets). Phase 1: 5 steps at batch 96 x 3 x 224 x 224. Phase 2: `timm.utils.reparameterize_model`
fuses every block into one 3x3 (or 1x1) conv with bias (a new module; the training model is deleted
and the cache emptied), the fused model is compiled with `torch.compile` (default mode) and run under
`torch.inference_mode()` with bf16 autocast at batch 256, channels-last, 3 batches, the first output
checked against the eager fused model. Seeded. 2 phases."""

import timm
import torch
from timm.loss import BinaryCrossEntropy
from timm.optim import create_optimizer_v2
from timm.utils import reparameterize_model

torch.manual_seed(2743)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("mobileone_s4", pretrained=False, num_classes=1000)
model = model.to(dev).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="adopt", lr=2e-3, weight_decay=0.05)
criterion = BinaryCrossEntropy(smoothing=0.1)
n_train = sum(p.numel() for p in model.parameters())

model.train()
for _step in range(5):
    x = torch.randn(96, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (96,), device=dev)
    loss = criterion(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("train", n_train, round(loss.item(), 4))
report("mobileone_s4_fp32_channels_last_adopt_bce")

del x, y, loss
model.eval()
deploy = reparameterize_model(model)  # a fused copy
del model, optimizer
torch.cuda.empty_cache()
print("deploy params", sum(p.numel() for p in deploy.parameters()))
compiled = torch.compile(deploy)
top = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for b in range(3):
        x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        out = compiled(x)
        if b == 0:
            ref = deploy(x)
            print("compiled vs eager", round((out.float() - ref.float()).abs().max().item(), 2))
            del ref
        top.append(out.argmax(-1))
print("predictions", torch.cat(top).shape[0])
report("mobileone_s4_reparameterized_compiled_inference_bf16")
