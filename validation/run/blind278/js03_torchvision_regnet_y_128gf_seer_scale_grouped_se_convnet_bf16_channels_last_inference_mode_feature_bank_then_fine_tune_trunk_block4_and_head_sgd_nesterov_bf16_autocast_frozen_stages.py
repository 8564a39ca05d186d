"""torchvision's largest classifier, RegNetY-128GF (644 M parameters, grouped 3x3 convolutions of group
width 264 with squeeze-excitation; `torchvision.models.regnet_y_128gf(weights=None)`), as a user of the
SEER-scale backbone runs it. Phase 1: the whole model in channels-last, `torch.inference_mode()` and
bf16 autocast over 3 batches of 32 x 3 x 224 x 224, pooled 7,392-wide features of the trunk kept in a
bf16 bank on the GPU (fc replaced by Identity). Phase 2: a fresh 100-class head, the stem and trunk
blocks 1-3 frozen (requires_grad False, kept in eval mode), block4 and the head trained for 3 steps of
SGD (momentum 0.9, nesterov) in fp32 weights under bf16 autocast at batch 24. Seeded. 2 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision

torch.manual_seed(2783)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = torchvision.models.regnet_y_128gf(weights=None)
feat_dim = model.fc.in_features
model.fc = nn.Identity()
model = model.to(dev).to(memory_format=torch.channels_last).eval()
print("params", sum(p.numel() for p in model.parameters()), "feat", feat_dim)

bank = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(3):
        x = torch.randn(32, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
        bank.append(model(x).to(torch.bfloat16))
bank = torch.cat(bank)
print("bank", tuple(bank.shape), bank.dtype)
report("regnet_y_128gf_bf16_inference_mode_feature_bank")

del x
model.fc = nn.Linear(feat_dim, 100).to(dev)
for p in model.parameters():
    p.requires_grad_(False)
for mod in (model.trunk_output.block4, model.fc):
    for p in mod.parameters():
        p.requires_grad_(True)
model.train()
model.stem.eval()
for name in ("block1", "block2", "block3"):
    getattr(model.trunk_output, name).eval()
params = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in params))
optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
for _step in range(3):
    x = torch.randn(24, 3, 224, 224, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (24,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("finetune", round(loss.item(), 3))
report("regnet_y_128gf_block4_head_sgd_nesterov_bf16_autocast")
