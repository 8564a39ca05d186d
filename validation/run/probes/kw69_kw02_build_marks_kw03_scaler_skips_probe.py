"""Session 69, helper kw: two questions of blind308 for the H100.

Part A (kw02, phase 0: the GPU holds 131,072 more allocated bytes than the twin after building, requested
equal): kw02's build, one step at a time, printing allocated / reserved / requested after each, and at the
end the active blocks whose size exceeds their request by 64 KiB or more (`torch.cuda.memory_snapshot()`),
so the step whose placement parts can be read off.
Part B (kw03: the GPU's records miss exactly NAdam's two state tensors, 190,840,192 bytes, from phase 1 on):
kw03's model and GradScaler, 3 steps at 64 and 2 checkpointed steps at 128, printing the scale and
`len(optimizer.state)` after each (a skipped step halves the scale and makes no state).
Plain python3, < 60 s, < 10 GB."""

import timm
import torch
from timm.loss import AsymmetricLossMultiLabel
from timm.utils import ModelEmaV3
from torch import nn
from torchvision.ops import MLP

dev = "cuda"


def mark(tag):
    s = torch.cuda.memory_stats()
    print(
        f"A {tag}: alloc {s['allocated_bytes.all.current']} reserved {s['reserved_bytes.all.current']} "
        f"requested {s['requested_bytes.all.current']}"
    )


torch.manual_seed(30802)
teacher = timm.create_model("deit3_base_patch16_224").to(dev)
mark("teacher fp32")
teacher = teacher.half().eval()
mark("teacher half")
for p in teacher.parameters():
    p.requires_grad_(False)
student = timm.create_model("deit3_small_patch16_224", drop_path_rate=0.1)
student.prune_intermediate_layers(indices=[2, 5, 8], prune_head=True)
student = student.to(dev)
mark("student")
projectors = nn.ModuleList(
    MLP(384, [1024, 768], norm_layer=nn.LayerNorm, activation_layer=nn.GELU) for _ in range(3)
).to(dev)
mark("projectors")
ema = ModelEmaV3(student, decay=0.999)
mark("ema")
slack = []
for seg in torch.cuda.memory_snapshot():
    for b in seg["blocks"]:
        if b["state"] == "active_allocated" and b["size"] - b["requested_size"] >= 65536:
            slack.append((b["size"], b["requested_size"]))
print("A slack blocks", sorted(slack))
del teacher, student, projectors, ema
torch.cuda.empty_cache()

torch.manual_seed(30803)
model = timm.create_model(
    "resnetblur50d", num_classes=80, drop_block_rate=0.1, drop_path_rate=0.05, global_pool="catavgmax"
)
model = model.to(dev).to(memory_format=torch.channels_last)
criterion = AsymmetricLossMultiLabel(gamma_neg=4, gamma_pos=0, clip=0.05)
optimizer = torch.optim.NAdam(
    model.parameters(), lr=2e-4, weight_decay=1e-4, momentum_decay=4e-3, decoupled_weight_decay=True
)
scaler = torch.amp.GradScaler("cuda")
model.train()
for step, batch in enumerate([64, 64, 64, 128, 128]):
    if step == 3:
        model.set_grad_checkpointing(True)
    x = torch.randn(batch, 3, 256, 256, device=dev).contiguous(memory_format=torch.channels_last)
    y = (torch.rand(batch, 80, device=dev) < 0.05).float()
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = criterion(logits.float(), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    print(f"B step {step}: scale {scaler.get_scale()} state {len(optimizer.state)}")
