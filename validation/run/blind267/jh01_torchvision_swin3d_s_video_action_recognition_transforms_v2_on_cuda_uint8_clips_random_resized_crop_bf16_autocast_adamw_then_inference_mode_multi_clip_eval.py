"""Video action recognition with torchvision's Video Swin Transformer (`swin3d_s`, random weights,
400 Kinetics classes replaced by a 101-way UCF-style head), clips decoded as uint8 and augmented on
the GPU with `torchvision.transforms.v2` over `tv_tensors.Video` (RandomResizedCrop to 224 with
antialias, RandomHorizontalFlip, ToDtype(float32, scale=True), Normalize), then permuted to
(B, C, T, H, W). Phase 1: 5 AdamW steps (lr 1e-4, weight decay 0.05, gradient clipping at 1.0)
under bf16 autocast at batch 4 x 16 frames of 256 x 320 uint8 clips. Phase 2: multi-clip
evaluation under `torch.inference_mode()` and bf16 autocast: 3 spatial crops (v2.Resize(224) of
the short side, then left, centre and right 224 crops by slicing) of 2 videos x 32 frames, logits
averaged over clips. The crop sizes are drawn from the CPU generator (seeded), so every size is
fixed. 2 phases."""

import torch
import torch.nn.functional as F
from torchvision import tv_tensors
from torchvision.models.video import swin3d_s
from torchvision.transforms import v2

torch.manual_seed(2671)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


MEAN, STD = (0.43216, 0.394666, 0.37645), (0.22803, 0.22145, 0.216989)
train_tf = v2.Compose(
    [
        v2.RandomResizedCrop(224, scale=(0.5, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ]
)

model = swin3d_s(weights=None)
model.head = torch.nn.Linear(model.head.in_features, 101)
model = model.to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
for _step in range(5):
    # a batch of decoded clips: (B, T, C, H, W) uint8, as torchvision.io.read_video / VideoReader give
    raw = torch.randint(0, 256, (4, 16, 3, 256, 320), dtype=torch.uint8, device=dev)
    clips = train_tf(tv_tensors.Video(raw))  # one crop for the whole batch, float32 normalized
    x = clips.as_subclass(torch.Tensor).permute(0, 2, 1, 3, 4).contiguous()  # (B, C, T, H, W)
    y = torch.randint(0, 101, (4,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train", tuple(x.shape), round(loss.item(), 3))
report("swin3d_s_train_bf16_autocast_v2_cuda_aug")

del raw, clips, x, loss
model.eval()
eval_tf = v2.Compose(
    [v2.Resize(224, antialias=True), v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    raw = torch.randint(0, 256, (2, 32, 3, 256, 340), dtype=torch.uint8, device=dev)
    vid = eval_tf(tv_tensors.Video(raw)).as_subclass(torch.Tensor)  # (2, 32, 3, 224, 297)
    w = vid.shape[-1]
    logits = 0
    for left in (0, (w - 224) // 2, w - 224):
        crop = vid[..., left : left + 224].permute(0, 2, 1, 3, 4).contiguous()
        logits = logits + model(crop).float().softmax(-1)
    print("eval", tuple(vid.shape), tuple((logits / 3).shape))
report("swin3d_s_three_crop_eval_inference_mode")
