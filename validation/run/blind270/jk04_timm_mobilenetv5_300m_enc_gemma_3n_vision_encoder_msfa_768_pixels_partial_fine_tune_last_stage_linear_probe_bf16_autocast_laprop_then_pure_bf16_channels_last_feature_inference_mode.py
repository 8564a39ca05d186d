"""timm's MobileNet-V5-300M encoder, the vision tower of Gemma 3n (`timm.create_model(
"mobilenetv5_300m_enc", pretrained=False)`: 294M parameters, universal inverted bottlenecks with
RMSNorm2d, mobile multi-query attention with strided keys/values in the last two stages, and the
multi-scale fusion adapter (MSFA) that resizes stage 3's and stage 4's maps to 16 x 16 and
concatenates them into 2,048 channels), random weights, at its native 768 x 768. Phase 1: a partial
fine-tune: stem and first three stages frozen (requires_grad False), the last stage (39 blocks, 212M
parameters), the MSFA and a new 100-way linear probe on the average-pooled 2,048 features trained with
timm's LaProp (`create_optimizer_v2(opt="laprop")`), fp32 weights under bf16 autocast, 4 steps at
batch 16. Phase 2: the encoder cast to bfloat16 and channels-last, the 256 soft-token features
(16 x 16 x 2,048, flattened as Gemma 3n feeds its projector) of 48 images in batches of 24 under
inference_mode. Seeded. 2 phases."""

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.optim import create_optimizer_v2

torch.manual_seed(2704)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


encoder = timm.create_model("mobilenetv5_300m_enc", pretrained=False).to(dev)
probe = nn.Linear(2048, 100).to(dev)
for p in encoder.parameters():
    p.requires_grad_(False)
for mod in (encoder.blocks[-1], encoder.msfa):
    for p in mod.parameters():
        p.requires_grad_(True)
trainable = [p for p in encoder.parameters() if p.requires_grad] + list(probe.parameters())
print("trainable", sum(p.numel() for p in trainable))
optimizer = create_optimizer_v2(trainable, opt="laprop", lr=3e-4, weight_decay=0.01)
encoder.train()
for _step in range(4):
    x = torch.randn(16, 3, 768, 768, device=dev)
    y = torch.randint(0, 100, (16,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        feats = encoder(x)
        loss = F.cross_entropy(probe(feats.mean((2, 3))), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("train", _step + 1, round(loss.item(), 3), tuple(feats.shape))
report("mobilenetv5_300m_enc_last_stage_fine_tune_bf16_autocast_laprop_b16_768")

del x, y, feats, loss, optimizer, trainable
encoder = encoder.to(torch.bfloat16).to(memory_format=torch.channels_last).eval()
tokens = []
with torch.inference_mode():
    for _b in range(2):
        x = torch.randn(24, 3, 768, 768, device=dev, dtype=torch.bfloat16).contiguous(
            memory_format=torch.channels_last
        )
        f = encoder(x)
        tokens.append(f.flatten(2).transpose(1, 2))
    soft_tokens = torch.cat(tokens)
print("soft tokens", tuple(soft_tokens.shape), soft_tokens.dtype)
report("mobilenetv5_300m_enc_pure_bf16_channels_last_soft_tokens_inference_mode_b24")
