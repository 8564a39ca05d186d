"""HF transformers ViViT video classifier (tubelet embedding by a 2x16x16 Conv3d, 12 layers, 768
wide, 12 heads, 400 classes) built from its config with fp32 weights; training under bf16 autocast
with label-smoothed cross entropy, fused SGD (momentum 0.9, Nesterov, weight decay), batches of 4
clips of 16 frames at 224x224, 3 steps; then eval of 8 clips under torch.inference_mode with softmax
averaged over 2 temporal crops; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import VivitConfig, VivitForVideoClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9503)
if SMALL:
    cfg = VivitConfig(
        image_size=32,
        num_frames=4,
        tubelet_size=[2, 8, 8],
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        num_labels=10,
    )
    B, EB = 2, 2
else:
    cfg = VivitConfig(image_size=224, num_frames=16, tubelet_size=[2, 16, 16], num_labels=400)
    B, EB = 4, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
model = VivitForVideoClassification(cfg).to(device)
optimizer = torch.optim.SGD(
    model.parameters(), lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4, fused=device == "cuda"
)
S, F_ = cfg.image_size, cfg.num_frames
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    clips = torch.randn(B, F_, 3, S, S, device=device)
    labels = torch.randint(0, cfg.num_labels, (B,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(pixel_values=clips).logits
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=0.1)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del clips, labels, logits, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
model.eval()
video = torch.randn(EB, 2 * F_, 3, S, S, device=device)
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    probs = sum(model(pixel_values=video[:, i * F_ : (i + 1) * F_]).logits.softmax(-1) for i in range(2)) / 2
    top5 = probs.topk(5, dim=-1).indices
if device == "cuda":
    print(
        f"eval top5 {tuple(top5.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
