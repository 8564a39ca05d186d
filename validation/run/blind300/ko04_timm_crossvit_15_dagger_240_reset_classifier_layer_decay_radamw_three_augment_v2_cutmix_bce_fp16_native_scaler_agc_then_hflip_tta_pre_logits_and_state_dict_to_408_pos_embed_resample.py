"""Fine-tuning timm 1.0.29's CrossViT-15-dagger (`crossvit_15_dagger_240`: a 12-pixel-patch small branch at
240 and a 16-pixel large branch at 224 fed a bicubic-rescaled copy, multi-conv "dagger" patch stems,
cross-attention fusion of the class tokens) from its 1000-class build to 200 classes with
`reset_classifier(200)`, in the DeiT III recipe: "3-Augment" on the GPU (`torchvision.transforms.v2`
`RandomChoice` of grayscale / solarize / Gaussian blur, colour jitter 0.3, random resized crop, flip),
CutMix (timm `Mixup`, cutmix alpha 1.0, batch mode) with timm's `BinaryCrossEntropy` (target threshold
0.2, smoothing 0.1), layer-wise learning-rate decay 0.65 through `create_optimizer_v2(..., "radamw",
layer_decay=0.65)` (the model's `group_matcher`), fp16 autocast and timm's `NativeScaler` with adaptive
gradient clipping (`clip_mode="agc"`, 0.02), batch 96.

Phases: 0 model built, head reset, optimizer; 1 first step; 2 three more; 3 eval under inference_mode and
fp16 autocast: horizontal-flip TTA of 2 batches of 128 and the concatenated class-token embeddings
(`forward_head(pre_logits=True)`, 576 wide) for a cosine retrieval; 4 the state dict moved to the CPU, the
model and optimizer freed, `empty_cache`, a `crossvit_15_dagger_408` built, its position embeddings
resampled from the 240 model's with `resample_abs_pos_embed` and loaded, eval at 408 on 2 batches of 32."""

import numpy as np
import timm
import torch
import torch.nn.functional as F
from timm.data import Mixup
from timm.layers import resample_abs_pos_embed
from timm.loss import BinaryCrossEntropy
from timm.optim import create_optimizer_v2
from timm.utils import NativeScaler
from torchvision.transforms import v2

torch.manual_seed(3004)
np.random.seed(3004)
dev = "cuda"
B, STEPS, NUM_CLASSES = 96, 4, 200
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("crossvit_15_dagger_240", pretrained=False, drop_path_rate=0.1).to(dev)
model.reset_classifier(NUM_CLASSES)
optimizer = create_optimizer_v2(model, "radamw", lr=5e-4, weight_decay=0.05, layer_decay=0.65)
scaler = NativeScaler()
mixup = Mixup(mixup_alpha=0.0, cutmix_alpha=1.0, mode="batch", label_smoothing=0.0, num_classes=NUM_CLASSES)
criterion = BinaryCrossEntropy(smoothing=0.1, target_threshold=0.2)
report("crossvit_15_dagger_reset_classifier_radamw_layer_decay")

three_augment = v2.Compose(
    [
        v2.RandomResizedCrop(240, scale=(0.25, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.RandomChoice(
            [v2.Grayscale(3), v2.RandomSolarize(128, p=1.0), v2.GaussianBlur(9, sigma=(0.1, 2.0))]
        ),
        v2.ColorJitter(0.3, 0.3, 0.3),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)


def batch_uint8(n, size):
    return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, device=dev)


def to_input(x):
    return v2.functional.normalize(v2.functional.to_dtype(x, torch.float32, scale=True), MEAN, STD)


model.train()
for step in range(STEPS):
    raw = batch_uint8(B, 288)
    x = torch.stack([three_augment(img) for img in raw])
    y = torch.randint(0, NUM_CLASSES, (B,), device=dev)
    x, y_soft = mixup(x, y)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = criterion(model(x), y_soft)
    optimizer.zero_grad(set_to_none=True)
    scaler(loss, optimizer, clip_grad=0.02, clip_mode="agc", parameters=model.parameters())
    if step == 0:
        print("first loss", round(loss.item(), 4))
        report("crossvit_first_step_fp16_agc")
print("loss", round(loss.item(), 4))
report("crossvit_three_more_steps")

del raw, x, y, y_soft, loss
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    embs = []
    for _ in range(2):
        x = to_input(batch_uint8(128, 240))
        feats = model.forward_features(x)
        logits = model.forward_head(feats) + model(torch.flip(x, dims=[3]))
        embs.append(F.normalize(model.forward_head(feats, pre_logits=True).float(), dim=1))
    emb = torch.cat(embs)
    nearest = (emb @ emb.t()).fill_diagonal_(-1).argmax(1)
print("tta", tuple(logits.shape), "retrieval", tuple(nearest.shape), emb.shape[1])
report("hflip_tta_pre_logits_retrieval")

state = {k: v.cpu() for k, v in model.state_dict().items()}
del model, optimizer, scaler, x, feats, logits, embs, emb, nearest
torch.cuda.empty_cache()
big = timm.create_model("crossvit_15_dagger_408", pretrained=False, num_classes=NUM_CLASSES)
for i, patch in enumerate((12, 16)):
    key = f"pos_embed_{i}"
    grid = big.patch_embed[i].img_size[0] // patch
    old_grid = int((state[key].shape[1] - 1) ** 0.5)
    state[key] = resample_abs_pos_embed(state[key], new_size=(grid, grid), old_size=(old_grid, old_grid))
print(big.load_state_dict(state, strict=True))
big = big.to(dev).eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    for _ in range(2):
        top5 = big(to_input(batch_uint8(32, 408))).topk(5, dim=1).indices
print("408 top5", tuple(top5.shape))
report("state_dict_cpu_to_408_pos_embed_resample_eval")
