"""timm's VOLO-D1 (Yuan et al. 2021) trained the token-labeling way: outlook attention (each 3 x 3 window's
attention weights predicted by a linear from the centre token, values gathered by `F.unfold` and
scattered back by `F.fold`, overlap-added) in the first stage, class attention at the end, and an
auxiliary head over all 14 x 14 patch tokens. `timm.create_model("volo_d1_224", pretrained=False,
use_mix_token=True)` and `model.forward_train(x)`: in training it cuts a random box (lam drawn by a CPU
`torch.distributions.Beta`, the box by `torch.randint` on the CPU, both seeded: the same box on every
machine) and swaps it with the batch-flipped tokens, then returns (the class token before the head,
which the loop passes through `model.head`, per-token logits, box); the per-token dense targets (random
labels here, one per patch, standing in for a teacher's score maps) are flipped inside the same box.
Loss: cross entropy of the class token (mixed by the box's area) + 0.5 x the dense token loss. bf16
autocast, `create_optimizer_v2(opt="adabelief")` (decoupled decay), gradient clipping at 5.0. Phase 1: 6
steps at batch 64 x 224 x 224. Phase 2: eval under inference_mode and bf16 autocast at batch 192, where
`forward` returns class logits + 0.5 x the per-token maximum. Seeded (torch and NumPy). 2 phases."""

import numpy as np
import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(2702)
np.random.seed(2702)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model(
    "volo_d1_224", pretrained=False, num_classes=1000, use_mix_token=True, drop_path_rate=0.1
)
model = model.to(dev)
optimizer = create_optimizer_v2(model, opt="adabelief", lr=1.6e-3, weight_decay=0.05)
model.train()
for _step in range(6):
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)
    dense = torch.randint(0, 1000, (64, 14, 14), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        x_cls, x_aux, (bbx1, bby1, bbx2, bby2) = model.forward_train(x)
        x_cls = model.head(x_cls)  # forward_train returns the class token before the head
        mixed = dense.clone()
        mixed[:, bbx1:bbx2, bby1:bby2] = dense.flip(0)[:, bbx1:bbx2, bby1:bby2]
        lam = 1.0 - (bbx2 - bbx1) * (bby2 - bby1) / 196.0
        loss_cls = lam * F.cross_entropy(x_cls, y) + (1.0 - lam) * F.cross_entropy(x_cls, y.flip(0))
        loss_aux = F.cross_entropy(x_aux.reshape(-1, 1000), mixed.reshape(-1))
        loss = loss_cls + 0.5 * loss_aux
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    optimizer.step()
print("train", _step + 1, round(loss.item(), 3), (bbx1, bby1, bbx2, bby2))
report("volo_d1_token_labeling_mix_token_bf16_adabelief_b64")

del x, y, dense, mixed, x_cls, x_aux, loss, loss_cls, loss_aux
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(2):
        x = torch.randn(192, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (192,), device=dev)
        correct += (model(x).argmax(-1) == y).sum().item()
print("top1", correct / 384)
report("volo_d1_eval_cls_plus_aux_inference_mode_bf16_b192")
