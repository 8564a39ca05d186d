"""Several LoRA adapters on one timm vision transformer and peft's adapter arithmetic: a timm
vit_base_patch16_224 (random init, 37 classes, fp32) with three LoRA adapters of ranks 8, 16 and 32 on
every block's attention qkv/proj and MLP fc1/fc2 (a `target_modules` regex), the classifier head unfrozen
by hand and shared; each adapter trained 2 steps at 64 x 224 after `set_adapter(name)` (bf16 autocast,
one AdamW per adapter). Then `add_weighted_adapter` combines them twice: by `combination_type="svd"`
(each module's weighted delta B@A factorised by `torch.linalg.svd` on the GPU, rank 32) and by
`combination_type="cat"` (rank 56); each combination is evaluated under `inference_mode` at batch 192,
then the three source adapters and the cat one are removed with `delete_adapter` and the svd one is
folded in by `merge_and_unload()` and evaluated again.

Phases: 0 model and three adapters built; 1 adapter training; 2 add_weighted_adapter svd + cat;
3 eval of both combinations; 4 delete_adapter + merge_and_unload; 5 merged eval."""

import os

import timm
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3424)
if SMALL:
    base = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=37, img_size=64)
    B, EVAL_B, RES = 4, 8, 64
else:
    base = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=37)
    B, EVAL_B, RES = 64, 192, 224
device = "cuda" if torch.cuda.is_available() else "cpu"
TARGETS = r"blocks\.\d+\.(attn\.(qkv|proj)|mlp\.fc[12])"
RANKS = {"birds": 8, "cars": 16, "pets": 32}


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def images(n):
    return torch.randn(n, 3, RES, RES, device=device)


base = base.to(device)
names = list(RANKS)
model = get_peft_model(
    base,
    LoraConfig(r=RANKS[names[0]], lora_alpha=2 * RANKS[names[0]], target_modules=TARGETS),
    adapter_name=names[0],
)
for name in names[1:]:
    model.add_adapter(name, LoraConfig(r=RANKS[name], lora_alpha=2 * RANKS[name], target_modules=TARGETS))
head = model.base_model.model.head
report("built")

model.train()
for name in names:
    model.set_adapter(name)
    head.requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.05)
    for step in range(2):
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(images(B)), torch.randint(0, 37, (B,), device=device))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"{name} step {step} loss {loss.item():.4f} tensors {len(params)}")
        del loss
    del optimizer, params
report("train")

model.add_weighted_adapter(names, [0.5, 0.3, 0.2], "svd_mix", combination_type="svd")
model.add_weighted_adapter(names, [0.5, 0.3, 0.2], "cat_mix", combination_type="cat")
report("combine")

model.eval()
for name in ("svd_mix", "cat_mix"):
    model.set_adapter(name)
    with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        probs = model(images(EVAL_B)).softmax(-1)
    print(name, "mean max prob", round(probs.max(-1).values.mean().item(), 4))
    del probs
report("eval")

model.set_adapter("svd_mix")
for name in [*names, "cat_mix"]:
    model.delete_adapter(name)
merged = model.merge_and_unload()
del model
report("merge")

with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    probs = merged(images(EVAL_B)).softmax(-1)
print("merged mean max prob", round(probs.max(-1).values.mean().item(), 4))
report("merged eval")
