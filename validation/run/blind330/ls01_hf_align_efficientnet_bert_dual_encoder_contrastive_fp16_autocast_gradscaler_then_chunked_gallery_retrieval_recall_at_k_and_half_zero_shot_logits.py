"""An image-text retrieval project on Hugging Face ALIGN (AlignModel: an EfficientNet-B0-sized vision tower
with depthwise convs, squeeze-excitation and drop-connect, plus a 4-layer BERT text tower and a text
projection), built from configs: contrastive fine-tuning with fp16 autocast, a GradScaler and AdamW with
a learnable temperature; then a gallery of images and captions is embedded in chunks with
get_image_features / get_text_features under inference_mode and fp16 autocast, a similarity matrix is
built on the GPU and recall@1/5/10 is computed with topk; finally the model is cast with `.half()` and
zero-shot class logits are scored for a batch against 20 prompt embeddings.

Phases: 0 model and data; 1 contrastive fp16 training; 2 chunked gallery retrieval; 3 half zero-shot."""

import os

import torch
import torch.nn.functional as F
from transformers import AlignConfig, AlignModel, AlignTextConfig, AlignVisionConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3301)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    IMG, BS, STEPS, GALLERY, CHUNK, V, SEQ = 64, 4, 2, 16, 8, 2000, 16
else:
    IMG, BS, STEPS, GALLERY, CHUNK, V, SEQ = 224, 48, 6, 384, 96, 30522, 32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


vision = AlignVisionConfig(image_size=IMG, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280)
text = AlignTextConfig(
    vocab_size=V,
    hidden_size=384,
    num_hidden_layers=4,
    num_attention_heads=6,
    intermediate_size=1536,
    max_position_embeddings=64,
)
config = AlignConfig(text_config=text.to_dict(), vision_config=vision.to_dict(), projection_dim=320)
model = AlignModel(config).to(device)


def captions(n):
    lens = torch.randint(SEQ // 2, SEQ + 1, (n,))
    mask = (torch.arange(SEQ)[None, :] < lens[:, None]).long()
    ids = torch.randint(1000, V, (n, SEQ)) * mask
    ids[:, 0] = 101
    return ids.to(device), mask.to(device)


train_px = torch.randn(BS * STEPS, 3, IMG, IMG)
train_ids, train_mask = captions(BS * STEPS)
report("model and data")

opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", enabled=device == "cuda")
model.train()
for step in range(STEPS):
    sl = slice(step * BS, (step + 1) * BS)
    px = train_px[sl].to(device, non_blocking=True)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = model(input_ids=train_ids[sl], attention_mask=train_mask[sl], pixel_values=px, return_loss=True)
    scaler.scale(out.loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    del out, px
report("contrastive fp16 training")

model.eval()
gallery_px = torch.randn(GALLERY, 3, IMG, IMG)
gallery_ids, gallery_mask = captions(GALLERY)
img_feats, txt_feats = [], []
with (
    torch.inference_mode(),
    torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"),
):
    for i in range(0, GALLERY, CHUNK):
        img_feats.append(
            F.normalize(
                model.get_image_features(pixel_values=gallery_px[i : i + CHUNK].to(device)).pooler_output,
                dim=-1,
            )
        )
        txt_feats.append(
            F.normalize(
                model.get_text_features(
                    input_ids=gallery_ids[i : i + CHUNK], attention_mask=gallery_mask[i : i + CHUNK]
                ).pooler_output,
                dim=-1,
            )
        )
    img_feats = torch.cat(img_feats).float()
    txt_feats = torch.cat(txt_feats).float()
    sim = txt_feats @ img_feats.T
    ranks = sim.topk(10, dim=1).indices
    target = torch.arange(GALLERY, device=device)[:, None]
    recall = {k: (ranks[:, :k] == target).any(dim=1).float().mean().item() for k in (1, 5, 10)}
print("recall", {k: round(v, 3) for k, v in recall.items()})
del sim, ranks
report("chunked gallery retrieval")

model.half()
prompt_ids, prompt_mask = captions(20)
with torch.inference_mode():
    px = torch.randn(BS, 3, IMG, IMG, device=device, dtype=torch.float16)
    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, pixel_values=px)
    probs = out.logits_per_image.float().softmax(dim=-1)
    pred = probs.argmax(dim=-1)
print("zero-shot", tuple(probs.shape), pred[:8].tolist())
report("half zero-shot")
