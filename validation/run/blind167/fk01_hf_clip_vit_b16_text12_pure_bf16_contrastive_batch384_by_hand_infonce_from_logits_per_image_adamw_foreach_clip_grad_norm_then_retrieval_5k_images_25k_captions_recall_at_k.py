"""Contrastive image-text training of Hugging Face's CLIPModel from CLIPConfig in pure bf16, as
open_clip's `--precision pure_bf16` runs it (a ViT-B/16 image tower: 224 x 224, patch 16, 768
wide, 12 layers, 197 tokens; a 12-layer 512-wide text tower over 77 tokens, vocabulary 49,408; a
512-wide projection; every weight bf16 through model.to(torch.bfloat16), sdpa attention): batches
of 384 image-caption pairs, the symmetric InfoNCE loss written by hand from the model's (B, B)
`logits_per_image` and `logits_per_text` (labels arange(B), the mean of the two cross entropies in
fp32), AdamW (foreach, lr 5e-4, betas 0.9/0.98, eps 1e-6, weight decay 0.2 on matrices only),
`clip_grad_norm_` at 1.0 and the logit scale clamped to log(100), 4 steps (the first two their own
phases, then two more); then MS-COCO-style retrieval under no_grad: 5,000 images and 25,000
captions (5 a image) encoded in chunks of 1,000 and normalized, the (5,000, 25,000) similarity in
fp32, recall@1/5/10 both ways by topk; 5 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import CLIPConfig, CLIPModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16701)
if SMALL:
    text_cfg = dict(
        vocab_size=300,
        eos_token_id=299,
        bos_token_id=298,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    vision_cfg = dict(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        image_size=64,
        patch_size=16,
    )
    B, CTX, STEPS, N_IMG, CHUNK, HW, PROJ = 16, 16, 4, 40, 20, 64, 16
else:
    text_cfg = dict(
        vocab_size=49408,
        hidden_size=512,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=8,
        max_position_embeddings=77,
    )
    vision_cfg = dict(
        hidden_size=768,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=12,
        image_size=224,
        patch_size=16,
    )
    B, CTX, STEPS, N_IMG, CHUNK, HW, PROJ = 384, 77, 4, 5000, 1000, 224, 512
config = CLIPConfig(text_config=text_cfg, vision_config=vision_cfg, projection_dim=PROJ)
EOT = config.text_config.vocab_size - 1
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CLIPModel(config).to(device=device, dtype=torch.bfloat16)
params_decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embedding" not in n]
params_rest = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "embedding" not in n)]
optimizer = torch.optim.AdamW(
    [{"params": params_decay, "weight_decay": 0.2}, {"params": params_rest, "weight_decay": 0.0}],
    lr=5e-4,
    betas=(0.9, 0.98),
    eps=1e-6,
)
MEAN = torch.tensor([0.48145466, 0.4578275, 0.40821073], device=device).view(1, 3, 1, 1)
STD = torch.tensor([0.26862954, 0.26130258, 0.27577711], device=device).view(1, 3, 1, 1)


def phase(name):
    if device == "cuda":
        print(f"{name} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def captions(n):
    ids = torch.randint(1, EOT, (n, CTX), device=device)
    lengths = torch.randint(8, CTX + 1, (n,), device=device)
    pos = torch.arange(CTX, device=device).unsqueeze(0)
    mask = (pos < lengths.unsqueeze(1)).long()
    ids = ids * mask
    ids.scatter_(1, (lengths - 1).unsqueeze(1), EOT)
    return ids, mask


def images(n):
    x = torch.rand(n, 3, HW, HW, device=device)
    return ((x - MEAN) / STD).to(torch.bfloat16)


phase("model")
model.train()
labels = torch.arange(B, device=device)
for step in range(STEPS):
    ids, mask = captions(B)
    out = model(input_ids=ids, attention_mask=mask, pixel_values=images(B))
    loss = (
        F.cross_entropy(out.logits_per_image.float(), labels)
        + F.cross_entropy(out.logits_per_text.float(), labels)
    ) / 2
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(100))
    print(f"step {step} loss {loss.item():.4f}")
    del out, loss, ids, mask
    if step < 2 or step == STEPS - 1:
        phase(f"step {step}")

model.eval()
with torch.no_grad():
    img_feats, txt_feats = [], []
    for _start in range(0, N_IMG, CHUNK):
        img_feats.append(
            F.normalize(model.get_image_features(pixel_values=images(CHUNK)).pooler_output, dim=-1)
        )
    for _start in range(0, 5 * N_IMG, CHUNK):
        ids, mask = captions(CHUNK)
        txt_feats.append(
            F.normalize(model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output, dim=-1)
        )
    img_feats = torch.cat(img_feats)
    txt_feats = torch.cat(txt_feats)
    phase("encode")
    sims = img_feats.float() @ txt_feats.float().t()
    txt_owner = torch.arange(5 * N_IMG, device=device) // 5
    i2t = sims.topk(10, dim=1).indices
    hit_i2t = txt_owner[i2t] == torch.arange(N_IMG, device=device).unsqueeze(1)
    t2i = sims.t().topk(10, dim=1).indices
    hit_t2i = t2i == txt_owner.unsqueeze(1)
    for k in (1, 5, 10):
        r_i2t = hit_i2t[:, :k].any(1).float().mean().item()
        r_t2i = hit_t2i[:, :k].any(1).float().mean().item()
        print(f"R@{k} i2t {r_i2t:.4f} t2i {r_t2i:.4f}")
phase("recall")
