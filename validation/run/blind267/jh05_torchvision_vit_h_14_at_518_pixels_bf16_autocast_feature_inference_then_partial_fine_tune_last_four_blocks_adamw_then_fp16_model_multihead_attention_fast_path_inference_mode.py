"""torchvision's largest classifier, ViT-H/14 (`vit_h_14(weights=None, image_size=518)`: 32 blocks
of width 1,280, 16 heads, 1,370 tokens at 518 x 518; 633M parameters, random weights), as a
SWAG-style fine-tuning user runs it. Phase 1: fp32 weights, feature inference under
`torch.inference_mode()` and bf16 autocast at batch 16 (nn.MultiheadAttention's slow path, as
autocast disables its fast path: `F.multi_head_attention_forward` with need_weights=False into
scaled_dot_product_attention), 2 batches. Phase 2: partial fine-tuning: every parameter frozen but
the last 4 encoder blocks, the final LayerNorm and a new 200-way head; AdamW (lr 1e-4) over those,
bf16 autocast, 4 steps at batch 8. Phase 3: the model cast to fp16 (`model.half()`) and run in eval
mode under `torch.inference_mode()` without autocast at batch 32, 2 batches: each block's
nn.MultiheadAttention takes the native fast path (`torch._native_multi_head_attention`). 3 phases."""

import torch
import torch.nn.functional as F
from torchvision.models import vit_h_14

torch.manual_seed(2675)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = vit_h_14(weights=None, image_size=518).to(dev)
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(2):
        x = torch.randn(16, 3, 518, 518, device=dev)
        feats = model(x)
print("features", tuple(feats.shape), feats.dtype)
report("vit_h_14_518_bf16_autocast_inference")

del x, feats
model.heads = torch.nn.Sequential(torch.nn.Linear(1280, 200)).to(dev)
for p in model.parameters():
    p.requires_grad_(False)
trainable = list(model.encoder.layers[-4:].parameters()) + list(model.encoder.ln.parameters())
trainable += list(model.heads.parameters())
for p in trainable:
    p.requires_grad_(True)
model.train()
opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.05)
for _step in range(4):
    x = torch.randn(8, 3, 518, 518, device=dev)
    y = torch.randint(0, 200, (8,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("fine-tune", sum(p.numel() for p in trainable), round(loss.item(), 3))
report("vit_h_14_last_four_blocks_fine_tune_bf16")

del opt, x, y, loss
model.half().eval()
with torch.inference_mode():
    for _b in range(2):
        x = torch.randn(32, 3, 518, 518, device=dev, dtype=torch.float16)
        logits = model(x)
print("fp16", tuple(logits.shape), logits.dtype)
report("vit_h_14_fp16_mha_fast_path_inference_mode")
