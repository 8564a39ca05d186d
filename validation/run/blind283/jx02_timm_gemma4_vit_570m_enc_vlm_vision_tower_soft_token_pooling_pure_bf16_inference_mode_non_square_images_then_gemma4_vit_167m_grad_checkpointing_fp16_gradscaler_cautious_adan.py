"""Gemma 4's vision towers as timm 1.0.29 ships them (`timm/models/gemma4_vit.py`, random weights).
Phase 1: `timm.create_model("gemma4_vit_570m_enc", pretrained=False)` (27 blocks of 1,152 with 16 heads
of 72, 2-D multidimensional RoPE, gated MLPs, RMSNorm; the native VLM encoder that pools patch tokens
into 3x3-cell soft tokens and scales by sqrt(D)) cast to bf16 as a VLM would hold it, run under
`torch.inference_mode()` on raw [0, 1] pixel batches: 8 images of 768x768 (2,304 patches, 256 soft
tokens), then 8 of 672x1,008 (2,646 patches, 294 soft tokens), then 4 of 1,152x1,152 (5,184 patches,
576 soft tokens); the soft tokens are projected to a 2,560-wide text space by a bf16 `nn.Linear`.
Phase 2: `timm.create_model("gemma4_vit_167m", pretrained=False, num_classes=200)` (16 x 768, masked
mean pool + norm + head) fine-tuned in fp32 weights with fp16 autocast and `torch.amp.GradScaler`,
`model.set_grad_checkpointing(True)`, `timm.optim.create_optimizer_v2(model, opt="cadan", lr=1e-3,
weight_decay=0.02)` (cautious Adan: exp_avg, exp_avg_diff, exp_avg_sq and the previous gradient per
parameter): 4 steps at batch 32 x 3 x 448 x 448 (784 patches), then a no_grad fp16 evaluation at batch
64. Seeded. 2 phases."""

import timm
import torch
from timm.optim import create_optimizer_v2

torch.manual_seed(2832)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


tower = timm.create_model("gemma4_vit_570m_enc", pretrained=False).to(dev, torch.bfloat16).eval()
projector = torch.nn.Linear(1152, 2560, bias=False).to(dev, torch.bfloat16)
with torch.inference_mode():
    for n, h, w in ((8, 768, 768), (8, 672, 1008), (4, 1152, 1152)):
        pixels = torch.rand(n, 3, h, w, device=dev, dtype=torch.bfloat16)
        soft = tower(pixels)
        emb = projector(soft)
        print("soft tokens", tuple(soft.shape), tuple(emb.shape), round(emb.float().std().item(), 3))
        del pixels, soft, emb
report("gemma4_vit_570m_enc_bf16_inference_mode")

del tower, projector
model = timm.create_model("gemma4_vit_167m", pretrained=False, num_classes=200).to(dev)
model.set_grad_checkpointing(True)
optimizer = create_optimizer_v2(model, opt="cadan", lr=1e-3, weight_decay=0.02)
scaler = torch.amp.GradScaler("cuda")
model.train()
for _step in range(4):
    x = torch.rand(32, 3, 448, 448, device=dev)
    y = torch.randint(0, 200, (32,), device=dev)
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
print("train", round(loss.item(), 3), scaler.get_scale())
del x, y, loss
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    x = torch.rand(64, 3, 448, 448, device=dev)
    print("eval", model(x).argmax(-1)[:8].tolist())
report("gemma4_vit_167m_classifier_ckpt_fp16_scaler_cadan")
