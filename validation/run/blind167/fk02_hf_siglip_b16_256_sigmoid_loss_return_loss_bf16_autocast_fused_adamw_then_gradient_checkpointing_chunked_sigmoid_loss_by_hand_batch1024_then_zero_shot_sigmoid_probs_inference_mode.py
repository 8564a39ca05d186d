"""SigLIP pre-training from config on Hugging Face's SiglipModel (a ViT-B/16 image tower at 256 x
256: 256 patches, 768 wide, 12 layers, the multihead-attention-pooling head; a 12-layer 768-wide
text tower over 64 tokens, vocabulary 32,000, pooled at the last token as SigLIP pads to max length;
the learned logit scale and bias initialised to log(10) and -10; fp32 weights): first
`model(..., return_loss=True)`, transformers' port of big_vision's pairwise sigmoid loss (the (B, B)
eye, the +-1 label matrix, logsigmoid and the row sums) at batch 256 under bf16 autocast with fused
AdamW (lr 1e-3, betas 0.9/0.95, weight decay 1e-4 on matrices), 2 steps each its own phase; then
the batch raised to 1,024 with `gradient_checkpointing_enable()` and the loss written by hand as
open_clip's SigLipLoss computes it across 4 simulated devices (the text features in 4 chunks, each
chunk's (1,024, 256) logits with positives only in the local block, the chunk losses summed),
2 steps in one phase; then zero-shot classification under inference_mode: 1,000 class prompts in
chunks of 500, 2,048 images in chunks of 512, the sigmoid probabilities and top-5; 5 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import SiglipConfig, SiglipModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16702)
if SMALL:
    text_cfg = dict(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=16,
    )
    vision_cfg = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=16,
    )
    B1, B2, CTX, WORLD, CLASSES, CCHUNK, IMAGES, ICHUNK, HW = 16, 32, 16, 4, 10, 5, 16, 8, 64
else:
    text_cfg = dict(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        max_position_embeddings=64,
    )
    vision_cfg = dict(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=256,
        patch_size=16,
    )
    B1, B2, CTX, WORLD, CLASSES, CCHUNK, IMAGES, ICHUNK, HW = 256, 1024, 64, 4, 1000, 500, 2048, 512, 256
config = SiglipConfig(text_config=text_cfg, vision_config=vision_cfg)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = SiglipModel(config)
with torch.no_grad():
    model.logit_scale.fill_(math.log(10.0))
    model.logit_bias.fill_(-10.0)
model.to(device)
decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
optimizer = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 1e-4}, {"params": no_decay, "weight_decay": 0.0}],
    lr=1e-3,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def texts(n):
    ids = torch.randint(2, config.text_config.vocab_size, (n, CTX), device=device)
    lengths = torch.randint(6, CTX, (n, 1), device=device)
    pad = torch.arange(CTX, device=device).unsqueeze(0) >= lengths
    return ids.masked_fill(pad, config.text_config.pad_token_id)


def images(n):
    return torch.rand(n, 3, HW, HW, device=device).sub_(0.5).div_(0.5)


phase("model")
model.train()
for step in range(2):
    with torch.autocast(**amp):
        loss = model(input_ids=texts(B1), pixel_values=images(B1), return_loss=True).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del loss
    phase(f"step {step}")


def chunked_sigmoid_loss(image_features, text_features, logit_scale, logit_bias, world):
    # open_clip SigLipLoss: the local block has the positives, the other devices' text chunks only negatives
    n = image_features.shape[0] // world
    total = 0.0
    for rank in range(world):
        img = image_features[rank * n : (rank + 1) * n]
        for j in range(world):
            txt = text_features[((rank + j) % world) * n : ((rank + j) % world + 1) * n]
            logits = logit_scale * img @ txt.T + logit_bias
            labels = -torch.ones((n, n), device=logits.device, dtype=logits.dtype)
            if j == 0:
                labels = 2 * torch.eye(n, device=logits.device, dtype=logits.dtype) + labels
            total = total - F.logsigmoid(labels * logits).sum() / n
    return total / world


model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for step in range(2):
    with torch.autocast(**amp):
        img = F.normalize(model.get_image_features(pixel_values=images(B2)).pooler_output, dim=-1)
        txt = F.normalize(model.get_text_features(input_ids=texts(B2)).pooler_output, dim=-1)
        loss = chunked_sigmoid_loss(img, txt, model.logit_scale.exp(), model.logit_bias, WORLD)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"chunked step {step} loss {loss.item():.4f}")
    del img, txt, loss
phase("chunked")

model.eval()
with torch.inference_mode(), torch.autocast(**amp):
    classifier = torch.cat(
        [
            F.normalize(model.get_text_features(input_ids=texts(CCHUNK)).pooler_output, dim=-1)
            for _ in range(0, CLASSES, CCHUNK)
        ]
    )
    top5 = []
    for _start in range(0, IMAGES, ICHUNK):
        feats = F.normalize(model.get_image_features(pixel_values=images(ICHUNK)).pooler_output, dim=-1)
        probs = torch.sigmoid(feats @ classifier.t() * model.logit_scale.exp() + model.logit_bias)
        top5.append(probs.float().topk(5, dim=-1).indices.cpu())
    print(f"zero-shot {tuple(torch.cat(top5).shape)}")
phase("zero-shot")
