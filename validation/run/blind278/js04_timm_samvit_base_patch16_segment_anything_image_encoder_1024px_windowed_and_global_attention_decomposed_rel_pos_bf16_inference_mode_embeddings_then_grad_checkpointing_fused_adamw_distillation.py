"""The Segment Anything ViT-B image encoder as timm builds it (`timm.create_model("samvit_base_patch16",
pretrained=False, num_classes=0)`: 12 blocks at 1,024 x 1,024 pixels, 64 x 64 tokens, 14 x 14 window
attention with global attention in blocks 2, 5, 8 and 11, decomposed relative position biases passed to
SDPA as an additive mask, and the conv neck to 256 channels), as a user computing image embeddings and
then distilling it. Phase 1: embeddings of 3 batches of 4 images under `torch.inference_mode()` and bf16
autocast, `forward_features` giving (4, 256, 64, 64) each, kept on the GPU in bf16. Phase 2: the encoder
with `set_grad_checkpointing(True)`, fused AdamW (lr 1e-5), bf16 autocast, 3 steps at batch 2 regressing
the phase-1 embeddings (MSE). Seeded. 2 phases."""

import timm
import torch
import torch.nn.functional as F

torch.manual_seed(2784)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("samvit_base_patch16", pretrained=False, num_classes=0).to(dev).eval()
images, targets = [], []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(3):
        x = torch.randn(4, 3, 1024, 1024, device=dev)
        images.append(x)
        targets.append(model.forward_features(x).to(torch.bfloat16))
print("embeddings", tuple(targets[0].shape), len(targets))
report("samvit_b_inference_mode_bf16_embeddings")

images = [x.clone() for x in images]
targets = [t.clone() for t in targets]
model.train()
model.set_grad_checkpointing(True)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.1, fused=True)
for step in range(3):
    x = images[step][:2]
    t = targets[step][:2]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.mse_loss(model.forward_features(x).float(), t.float())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("distill", round(loss.item(), 4))
report("samvit_b_grad_checkpointing_fused_adamw_bf16")
