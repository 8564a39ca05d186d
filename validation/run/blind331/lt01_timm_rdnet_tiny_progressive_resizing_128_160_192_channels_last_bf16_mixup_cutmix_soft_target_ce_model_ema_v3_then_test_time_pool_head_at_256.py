"""A timm image-classification recipe on RDNet (DenseNets reloaded, `rdnet_tiny`, 10 classes) with
progressive resizing: three stages of training at 128, 160 and 192 px (the batch shrinks as the image
grows: 96, 64, 48), channels_last input and weights, bf16 autocast, timm's `Mixup` (mixup alpha 0.8,
cutmix alpha 1.0, switch prob 0.5, label smoothing 0.1) with `SoftTargetCrossEntropy`, AdamW with a
cosine schedule over all steps, drop_path 0.1, and a `ModelEmaV3` (decay 0.998, warmup) updated after
each step. Then the EMA weights are copied into a fresh model wrapped in timm's `TestTimePoolHead`
(1x1-conv classifier, average + max pooling over the 256 px feature map) and evaluated at 256 px
under inference_mode, beside the plain model at 192 px.

Phases: 0 data + model; 1 stage 128; 2 stages 160 and 192; 3 EMA test-time pooling at 256; 4 metrics."""

import os

import timm
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.loss import SoftTargetCrossEntropy
from timm.layers import TestTimePoolHead
from timm.utils import ModelEmaV3

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3311)
device = "cuda" if torch.cuda.is_available() else "cpu"
N_CLASSES = 10
if SMALL:
    STAGES = [(64, 8, 1), (80, 8, 1), (96, 4, 1)]
    N_TEST, TEST_IMG, TEST_BS = 8, 112, 4
else:
    STAGES = [(128, 96, 3), (160, 64, 3), (192, 48, 3)]
    N_TEST, TEST_IMG, TEST_BS = 96, 256, 32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = timm.create_model("rdnet_tiny", pretrained=False, num_classes=N_CLASSES, drop_path_rate=0.1)
model = model.to(device, memory_format=torch.channels_last)
ema = ModelEmaV3(model, decay=0.998, use_warmup=True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
total_steps = sum(s for _, _, s in STAGES)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total_steps)
mixup = Mixup(
    mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, mode="batch",
    label_smoothing=0.1, num_classes=N_CLASSES,
)
criterion = SoftTargetCrossEntropy()
test_x = torch.randn(N_TEST, 3, TEST_IMG, TEST_IMG)
test_y = torch.randint(0, N_CLASSES, (N_TEST,))
report("data")

step = 0
losses = []
for si, (img, bs, steps) in enumerate(STAGES):
    model.train()
    for _ in range(steps):
        x = torch.randn(bs, 3, img, img).to(device).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, N_CLASSES, (bs,)).to(device)
        x, y_soft = mixup(x, y)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = criterion(model(x), y_soft)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()
        sched.step()
        step += 1
        ema.update(model, step=step)
        losses.append(loss.detach())
    if si == 0:
        report("stage128")
report("stages160_192")

tt_model = timm.create_model("rdnet_tiny", pretrained=False, num_classes=N_CLASSES)
tt_model.load_state_dict(ema.module.state_dict())
tt_model = TestTimePoolHead(tt_model, original_pool=STAGES[-1][0] // 32)
tt_model = tt_model.to(device, memory_format=torch.channels_last).eval()
model.eval()
tt_logits, plain_logits = [], []
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for s in range(0, N_TEST, TEST_BS):
        x = test_x[s : s + TEST_BS].to(device).contiguous(memory_format=torch.channels_last)
        tt_logits.append(tt_model(x).float())
        x192 = F.interpolate(x, size=STAGES[-1][0], mode="bilinear", antialias=True)
        plain_logits.append(model(x192).float())
tt_logits = torch.cat(tt_logits)
plain_logits = torch.cat(plain_logits)
report("ttpool256")

y = test_y.to(device)
acc_tt = (tt_logits.argmax(-1) == y).float().mean()
acc_plain = (plain_logits.argmax(-1) == y).float().mean()
agree = (tt_logits.argmax(-1) == plain_logits.argmax(-1)).float().mean()
print(
    f"mean loss {torch.stack(losses).mean().item():.3f} acc tt {acc_tt.item():.3f} "
    f"plain {acc_plain.item():.3f} agree {agree.item():.3f}"
)
report("metrics")
