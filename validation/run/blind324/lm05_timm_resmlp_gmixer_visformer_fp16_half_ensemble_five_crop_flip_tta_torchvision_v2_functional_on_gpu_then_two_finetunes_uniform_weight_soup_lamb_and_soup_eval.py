"""An ensemble of three timm models no earlier script uses — ResMLP-12 (affine-normalised MLP-mixer),
gMixer-12 (gated-MLP mixer) and Visformer-tiny (convolutional stages then attention) — served in
pure fp16 (``.half()``) under ``torch.inference_mode``, with test-time augmentation done on the GPU
by ``torchvision.transforms.v2.functional``: 256 x 256 uint8 images converted to float, ``five_crop``
to 224 plus horizontal flips (ten views), normalised, each model's softmax averaged over views and
models. Then a "model soup": two copies of gMixer-12 fine-tuned from the same weights with different
seeds and learning rates (bf16 autocast, ``timm.optim.Lamb``), their state dicts averaged into the
original model, which is evaluated.

Phases: 0 the three fp16 models; 1 ensemble TTA over 3 batches of 32 images; 2 the ensemble freed,
an fp32 gMixer and two deep copies, each copy fine-tuned for 3 steps of batch 64 with its own Lamb;
3 the uniform soup built with ``torch.stack(...).mean(0)`` per tensor and loaded, copies and
optimizers freed; 4 the soup evaluated on batch 256 under bf16 autocast."""

import copy

import timm
import torch
import torch.nn.functional as F
import torchvision.transforms.v2.functional as TF
from timm.optim import Lamb

torch.manual_seed(3245)
device = "cuda" if torch.cuda.is_available() else "cpu"
NUM_CLASSES = 250
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


names = ["resmlp_12_224", "gmixer_12_224", "visformer_tiny"]
ensemble = [
    timm.create_model(n, pretrained=False, num_classes=NUM_CLASSES).to(device).half().eval() for n in names
]
report("ensemble")

agreement = []
with torch.inference_mode():
    for _ in range(3):
        images = torch.randint(0, 256, (32, 3, 256, 256), device=device, dtype=torch.uint8)
        x = TF.to_dtype(images, torch.float16, scale=True)
        crops = TF.five_crop(x, [224, 224])
        views = torch.cat([torch.cat([c, TF.horizontal_flip(c)]) for c in crops])
        views = TF.normalize(views, MEAN, STD)
        probs = torch.zeros(32, NUM_CLASSES, device=device)
        for m in ensemble:
            p = m(views).float().softmax(-1).view(10, 32, NUM_CLASSES).mean(0)
            probs += p / len(ensemble)
        agreement.append(probs.argmax(-1))
agreement = torch.cat(agreement)
if device == "cuda":
    print(f"ensemble predictions {agreement.numel()} distinct {agreement.unique().numel()}")
del images, x, crops, views, probs, p
report("ensemble_tta")

del ensemble, agreement
base = timm.create_model("gmixer_12_224", pretrained=False, num_classes=NUM_CLASSES).to(device)
ingredients = []
for seed, lr in ((1, 2e-3), (2, 5e-3)):
    torch.manual_seed(seed)
    m = copy.deepcopy(base).train()
    opt = Lamb(m.parameters(), lr=lr, weight_decay=0.02)
    for _step in range(3):
        x = torch.randn(64, 3, 224, 224, device=device)
        y = torch.randint(0, NUM_CLASSES, (64,), device=device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = F.cross_entropy(m(x), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    if device == "cuda":
        print(f"ingredient {seed} loss {loss.item():.4f}")
    ingredients.append((m, opt))
del x, y, loss
report("finetune_ingredients")

states = [m.state_dict() for m, _ in ingredients]
soup = {k: torch.stack([s[k].float() for s in states]).mean(0).to(states[0][k].dtype) for k in states[0]}
base.load_state_dict(soup)
del states, soup, ingredients, m, opt
report("soup")

base.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    y = torch.randint(0, NUM_CLASSES, (256,), device=device)
    acc = (base(torch.randn(256, 3, 224, 224, device=device)).argmax(-1) == y).float().mean()
if device == "cuda":
    print(f"soup acc {acc.item():.4f}")
report("soup_eval")
