"""Fine-tuning a Transformer-in-Transformer (TNT, Han et al. 2021) classifier on 100 classes with GPU-side
batch augmentation and a weight EMA kept by `torch.optim.swa_utils`, as small research training loops do
it. Model: timm 1.0.29's `tnt_s_patch16_224` (outer transformer over 16 x 16 patches, inner transformer
over 4 x 4 pixel words of each patch), `drop_path_rate=0.1`, `set_grad_checkpointing(True)`. Data: uint8
images on the GPU, augmented as a batch by `torchvision.transforms.v2`
(`RandomPerspective(distortion_scale=0.4, p=1.0)`, `RandomHorizontalFlip`, `ToDtype(float32, scale=True)`,
`Normalize`), labels smoothed in the cross-entropy.
Phase 1: the model, `AdamW(fused=True)` with a no-decay group for norms, biases, position and class tokens,
`AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.998), use_buffers=True)`.
Phase 2: the augmentation alone on 96 images of 256 x 256 (cropped to 224 by `v2.CenterCrop`).
Phase 3: 3 steps at 96 under bf16 autocast, `clip_grad_norm_(5.0)`, `ema.update_parameters(model)` after each.
Phase 4: the EMA model under `torch.inference_mode()` + fp16 autocast at 256 images, top-5 accuracy.
4 phases."""

import timm
import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from torchvision.transforms import v2

torch.manual_seed(30804)
dev = "cuda"
NUM_CLASSES = 100


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("tnt_s_patch16_224", num_classes=NUM_CLASSES, drop_path_rate=0.1).to(dev)
model.set_grad_checkpointing(True)
decay, no_decay = [], []
for name, p in model.named_parameters():
    (no_decay if p.ndim <= 1 or name.endswith(("pos", "cls_token")) else decay).append(p)
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=3e-4, fused=True
)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.998), use_buffers=True)
augment = v2.Compose(
    [
        v2.RandomPerspective(distortion_scale=0.4, p=1.0),
        v2.CenterCrop(224),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5]),
    ]
)
report("phase1 build")


def batch(n):
    raw = torch.randint(0, 256, (n, 3, 256, 256), dtype=torch.uint8, device=dev)
    return augment(raw), torch.randint(0, NUM_CLASSES, (n,), device=dev)


x, y = batch(96)
print("augmented", tuple(x.shape), x.dtype)
del x, y
report("phase2 augment")

model.train()
for step in range(3):
    x, y = batch(96)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    print(f"step {step} loss {loss.item():.3f}")
del x, y, loss
report("phase3 train")

ema.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    x = torch.randn(256, 3, 224, 224, device=dev)
    y = torch.randint(0, NUM_CLASSES, (256,), device=dev)
    top5 = ema(x).topk(5, dim=1).indices
    acc = (top5 == y[:, None]).any(1).float().mean()
    print("ema top5", float(acc))
report("phase4 ema eval")
