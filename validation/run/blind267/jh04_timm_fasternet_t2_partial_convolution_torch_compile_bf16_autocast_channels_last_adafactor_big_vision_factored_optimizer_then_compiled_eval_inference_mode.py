"""FasterNet-T2 (timm `fasternet_t2`, random weights): partial convolution blocks that split the
channels, convolve a quarter of them and concatenate (`forward="split_cat"`), compiled with
`torch.compile(model, dynamic=False)` (Inductor, default mode), channels-last, bf16 autocast, and
trained with timm's big-vision Adafactor (`create_optimizer_v2(model, opt="adafactorbv", lr=1e-3,
weight_decay=1e-4)`: factored second moments per row and column of each >= 2-D parameter of at least
16 on both sides, bf16 momentum). Phase 1: 8 steps at batch 128 x 3 x 224 x 224 with a cross
entropy loss over 1,000 classes. Phase 2: the same compiled module in eval mode (a recompile for
eval and the new batch) under `torch.inference_mode()` and bf16 autocast at batch 256, 3 batches.
2 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(2674)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("fasternet_t2", pretrained=False, num_classes=1000)
model = model.to(dev).to(memory_format=torch.channels_last)
optimizer = create_optimizer_v2(model, opt="adafactorbv", lr=1e-3, weight_decay=1e-4)
cmodel = torch.compile(model, dynamic=False)
for _step in range(8):
    x = torch.randn(128, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (128,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(cmodel(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print("train", round(loss.item(), 3))
report("fasternet_t2_compiled_bf16_adafactorbv_train")

del x, y, loss
cmodel.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(3):
        x = torch.randn(256, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        out = cmodel(x)
print("eval", tuple(out.shape), out.dtype)
report("fasternet_t2_compiled_eval_inference_mode_bf16")
