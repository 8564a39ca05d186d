"""Feature extraction with torchvision's FX utilities on RegNetY-32GF (`regnet_y_32gf(weights=None)`,
145 M parameters, squeeze-excitation bottlenecks with group width 232): `torchvision.models.
feature_extraction.create_feature_extractor` symbolically traces the model into a `GraphModule`
returning the outputs of `trunk_output.block2/3/4` and the pooled `flatten` node.
Phase 1: a frozen backbone in eval mode builds a feature bank under `torch.inference_mode()` and bf16
autocast, 4 batches of 64 x 3 x 288 x 288, each multi-scale map global-average-pooled and
concatenated with the pooled features into (256, 696 + 1392 + 3712 + 3712) fp32 rows kept on the GPU.
Phase 2: a linear probe (nn.Linear(9512, 1000)) trained on that bank with AdamW for 50 full-batch
steps in fp32. Phase 3: partial fine-tuning of the traced GraphModule itself: only
`trunk_output.block4` requires grad (the rest frozen, BatchNorm of the frozen part kept in eval),
bf16 autocast, SGD momentum 0.9, 4 steps at batch 48 x 3 x 224 x 224 through a fresh linear head on
the pooled node. Seeded. 3 phases."""

import torch
from torchvision.models import regnet_y_32gf
from torchvision.models.feature_extraction import create_feature_extractor

torch.manual_seed(2744)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


backbone = regnet_y_32gf(weights=None).to(dev)
return_nodes = {
    "trunk_output.block2": "c3",
    "trunk_output.block3": "c4",
    "trunk_output.block4": "c5",
    "flatten": "pooled",
}
extractor = create_feature_extractor(backbone, return_nodes=return_nodes)
del backbone
extractor.eval()
extractor.requires_grad_(False)

bank, labels = [], []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(4):
        x = torch.randn(64, 3, 288, 288, device=dev)
        feats = extractor(x)
        row = [feats[k].float().mean((2, 3)) for k in ("c3", "c4", "c5")] + [feats["pooled"].float()]
        bank.append(torch.cat(row, 1))
        labels.append(torch.randint(0, 1000, (64,), device=dev))
        del feats
bank = torch.cat(bank).clone()  # out of inference mode for training
labels = torch.cat(labels).clone()
print("bank", tuple(bank.shape), {k: tuple(v.shape) for k, v in extractor(x[:1]).items()})
del x
report("regnet_y_32gf_fx_feature_bank_inference_mode_bf16")

probe = torch.nn.Linear(bank.shape[1], 1000).to(dev)
opt = torch.optim.AdamW(probe.parameters(), lr=1e-3, weight_decay=1e-4)
bank = (bank - bank.mean(0)) / (bank.std(0) + 1e-6)
for _it in range(50):
    loss = torch.nn.functional.cross_entropy(probe(bank), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("probe", round(loss.item(), 4))
report("linear_probe_adamw_fp32")

del bank, labels, probe, opt, loss
for name, p in extractor.named_parameters():
    p.requires_grad_(name.startswith("trunk_output.block4"))
extractor.train()
for name, m in extractor.named_modules():
    if isinstance(m, torch.nn.BatchNorm2d) and not name.startswith("trunk_output.block4"):
        m.eval()
head = torch.nn.Linear(3712, 1000).to(dev)
params = [p for p in extractor.parameters() if p.requires_grad] + list(head.parameters())
print("tuned params", sum(p.numel() for p in params))
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
for _step in range(4):
    x = torch.randn(48, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (48,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(head(extractor(x)["pooled"]), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("fine-tune", round(loss.item(), 4))
report("graph_module_block4_fine_tune_bf16_sgd")
