"""Hugging Face transformers Swin2SR built from a config (no pretrained files): a lightweight x4
model (embed_dim 60, depths [6, 6, 6, 6], heads [6, 6, 6, 6], window 8, mlp ratio 2,
upsampler "pixelshuffledirect"), trained with L1 on random LR/HR pairs (LR by bicubic downsampling) under
bf16 autocast with foreach AdamW (lr 2e-4, betas (0.9, 0.99)) at batch 16 on 64 x 64 LR patches;
no_grad fp32 evaluation of 2 LR images of 120 x 120 (a multiple of the window);
then (deleted, empty_cache()) a real-world x4 model (embed_dim 96, depths [6, 6, 6, 6], heads [6, 6,
6, 6], upsampler "nearest+conv") with gradient_checkpointing_enable() (non-reentrant) trained under fp16
autocast with a GradScaler and SGD momentum 0.9 at batch 8 on 48 x 48 LR patches; finally that model cast
to bfloat16 (.to(torch.bfloat16)) under inference_mode on 1 LR image of 192 x 192. 4 phases."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from transformers import Swin2SRConfig, Swin2SRForImageSuperResolution  # noqa: E402

torch.manual_seed(2286)
device = "cuda"


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def pair(b, lr):
    hr = torch.rand(b, 3, lr * 4, lr * 4, device=device)
    lq = F.interpolate(hr, size=(lr, lr), mode="bicubic", align_corners=False).clamp(0, 1)
    return lq, hr


cfg = Swin2SRConfig(embed_dim=60, depths=[6, 6, 6, 6], num_heads=[6, 6, 6, 6], window_size=8, mlp_ratio=2.0,
                    upscale=4, upsampler="pixelshuffledirect", image_size=64, img_range=1.0)
model = Swin2SRForImageSuperResolution(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.99), foreach=True)
model.train()
for _ in range(4):
    lq, hr = pair(16, 64)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        sr = model(pixel_values=lq).reconstruction
    loss = F.l1_loss(sr.float(), hr)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"l1 {loss.item():.4f}")
del lq, hr, sr, loss
report("lightweight bf16 train")

model.eval()
with torch.no_grad():
    out = model(pixel_values=torch.rand(2, 3, 120, 120, device=device)).reconstruction
print("eval", out.shape)
del out
report("no_grad eval")

del model, opt
torch.cuda.empty_cache()
cfg2 = Swin2SRConfig(embed_dim=96, depths=[6, 6, 6, 6], num_heads=[6, 6, 6, 6], window_size=8, mlp_ratio=2.0,
                     upscale=4, upsampler="nearest+conv", image_size=48, img_range=1.0)
model = Swin2SRForImageSuperResolution(cfg2).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
model.train()
for _ in range(3):
    lq, hr = pair(8, 48)
    with torch.autocast("cuda", dtype=torch.float16):
        sr = model(pixel_values=lq).reconstruction
    loss = F.l1_loss(sr.float(), hr)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"real-world l1 {loss.item():.4f}")
del lq, hr, sr, loss
report("nearest+conv checkpointed fp16")

opt.zero_grad(set_to_none=True)
model = model.to(torch.bfloat16).eval()
with torch.inference_mode():
    out = model(pixel_values=torch.rand(1, 3, 192, 192, device=device, dtype=torch.bfloat16)).reconstruction
print("bf16 inference", out.shape)
report("bf16 weights inference")
