"""LoRA on the convolutions of a timm CNN, the way users adapt a vision backbone with peft: a timm
resnet50 (random init, 100 classes) whose layer3/layer4 bottleneck convolutions (conv1 1x1, conv2 3x3,
conv3 1x1) are picked by a `target_modules` regex and wrapped in peft LoRA Conv2d layers with DoRA
(`use_dora=True`, r 16, alpha 32), the classifier `fc` trained in full through `modules_to_save`; fp32
weights, channels_last, bf16 autocast, AdamW, 3 steps at 96 x 224. Then `merge_and_unload()` folds the
DoRA magnitudes and LoRA deltas into plain Conv2d weights, and the merged net is evaluated under
`torch.inference_mode()` at batch 256 in bf16 autocast.

Phases: 0 model and adapters built; 1 first step; 2 two more steps; 3 merge_and_unload; 4 merged eval."""

import os

import timm
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3421)
B, EVAL_B, RES = (4, 8, 64) if SMALL else (96, 256, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = timm.create_model("resnet50", pretrained=False, num_classes=100)
base = base.to(device=device, memory_format=torch.channels_last)
config = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.0,
    use_dora=True,
    target_modules=r".*layer[34]\.\d+\.conv[123]",
    modules_to_save=["fc"],
)
model = get_peft_model(base, config)
model.print_trainable_parameters()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05)
report("built")

model.train()
for step in range(3):
    x = torch.randn(B, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 100, (B,), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del logits, loss
    if step == 0:
        report("step0")
report("steps1-2")

del optimizer, params
merged = model.merge_and_unload()
del model
merged.eval()
print("merged convs", sum(isinstance(m, torch.nn.Conv2d) for m in merged.modules()))
report("merge")

correct = 0
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for _ in range(2):
        x = torch.randn(EVAL_B, 3, RES, RES, device=device).contiguous(memory_format=torch.channels_last)
        pred = merged(x).argmax(dim=1)
        correct += (pred == 0).sum().item()
print("class-0 predictions", correct)
report("eval")
