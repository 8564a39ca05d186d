"""A LayoutLM-free document classifier: a ViT over the page image, regions pooled from its patch grid,
with 2-D box embeddings by hand (as LayoutLMv3's 2-D positions), random pages and boxes.

Model: timm's vit_base_patch16_224 created from scratch (pretrained=False, no download) at 1024 x 768
with `dynamic_img_size=True` (3,072 patch tokens, fused SDPA). Its patch tokens are laid back on their
64 x 48 grid and 96 region boxes a page (word/line boxes from an OCR-free detector, random here, some
pages padded) are pooled by torchvision's `roi_align` (7 x 7, spatial_scale 1/16, aligned) and
projected; each region adds LayoutLM-style embeddings of its x0, y0, x1, y1, width and height
quantised to 0..1000 (six nn.Embedding tables). A 2-layer nn.TransformerEncoder over [page CLS] +
regions with a key-padding mask feeds a 16-way page classifier (RVL-CDIP-like) and a 4-way region
labeller (FUNSD-like, padding ignored). The backbone's gradient is scaled by 0.1 through fairseq's
GradMultiply, a custom autograd.Function.

Phases: the first step (bf16 autocast, fused AdamW, batch 8); 2 more steps; evaluation under
inference_mode at batch 16; then 1536 x 1152 pages (6,912 tokens, position embeddings resampled by
timm) with `set_grad_checkpointing()`, fp16 autocast, GradScaler and a foreach AdamW with layer-wise
learning-rate decay (0.75 a block) at batch 4. 4 phases."""

import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.ops import roi_align

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2096)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    ARCH, H, W, REGIONS, BATCH = "vit_tiny_patch16_224", 256, 192, 16, 2
else:
    ARCH, H, W, REGIONS, BATCH = "vit_base_patch16_224", 1024, 768, 96, 8
CLASSES, LABELS, POOL = 16, 4, 7


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class GradMultiply(torch.autograd.Function):
    """fairseq.modules.grad_multiply: identity forward, gradient scaled backward."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class DocClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.vit = timm.create_model(
            ARCH, pretrained=False, img_size=(H, W), num_classes=0, dynamic_img_size=True
        )
        d = self.vit.embed_dim
        self.d = d
        self.region_proj = nn.Linear(d * POOL * POOL, d)
        self.box_emb = nn.ModuleList([nn.Embedding(1001, d) for _ in range(6)])
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        layer = nn.TransformerEncoderLayer(d, 12 if d >= 768 else 3, 4 * d, dropout=0.1, batch_first=True)
        self.fusion = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.page_head = nn.Linear(d, CLASSES)
        self.region_head = nn.Linear(d, LABELS)

    def forward(self, pages, boxes, box_mask):
        b, _, h, w = pages.shape
        tokens = self.vit.forward_features(pages)[:, self.vit.num_prefix_tokens :]
        tokens = GradMultiply.apply(tokens, 0.1)
        grid = tokens.transpose(1, 2).reshape(b, self.d, h // 16, w // 16)
        pixel_boxes = boxes.float() / 1000 * torch.tensor([w, h, w, h], device=boxes.device)
        rois = [pixel_boxes[i] for i in range(b)]
        pooled = roi_align(grid, rois, output_size=POOL, spatial_scale=1 / 16, sampling_ratio=2, aligned=True)
        regions = self.region_proj(pooled.flatten(1)).view(b, -1, self.d)
        x0, y0, x1, y1 = boxes.unbind(-1)
        coords = (x0, y0, x1, y1, x1 - x0, y1 - y0)
        regions = regions + sum(emb(c) for emb, c in zip(self.box_emb, coords, strict=True))
        seq = torch.cat([self.cls.expand(b, 1, self.d).to(regions.dtype), regions], dim=1)
        pad = torch.cat([torch.zeros(b, 1, dtype=torch.bool, device=boxes.device), ~box_mask], dim=1)
        out = self.fusion(seq, src_key_padding_mask=pad)
        return self.page_head(out[:, 0]), self.region_head(out[:, 1:])


def batch(n, h, w):
    pages = torch.randn(n, 3, h, w, device=device)
    xy = torch.randint(0, 900, (n, REGIONS, 2), device=device)
    wh = torch.randint(10, 100, (n, REGIONS, 2), device=device)
    boxes = torch.cat([xy, xy + wh], dim=-1)  # x0, y0, x1, y1 in 0..1000
    counts = torch.arange(n, device=device) % 4 * (REGIONS // 8)  # some pages carry fewer regions
    box_mask = torch.arange(REGIONS, device=device) < (REGIONS - counts).unsqueeze(1)
    page_y = torch.randint(0, CLASSES, (n,), device=device)
    region_y = torch.randint(0, LABELS, (n, REGIONS), device=device).masked_fill(~box_mask, -100)
    return pages, boxes, box_mask, page_y, region_y


def loss_fn(model, data, dtype):
    pages, boxes, box_mask, page_y, region_y = data
    with torch.autocast("cuda", dtype=dtype, enabled=amp):
        page_logits, region_logits = model(pages, boxes, box_mask)
    page_loss = F.cross_entropy(page_logits.float(), page_y)
    region_loss = F.cross_entropy(region_logits.float().flatten(0, 1), region_y.flatten(), ignore_index=-100)
    return page_loss + region_loss, page_logits


model = DocClassifier().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05, fused=amp)
model.train()
for step in range(3):
    loss, _ = loss_fn(model, batch(BATCH, H, W), torch.bfloat16)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
with torch.inference_mode():
    data = batch(2 * BATCH, H, W)
    loss, page_logits = loss_fn(model, data, torch.bfloat16)
    acc = (page_logits.argmax(-1) == data[3]).float().mean()
print(f"eval loss {loss.item():.4f} page accuracy {acc.item():.3f}")
del data, loss, page_logits, acc
report("eval")

# layer-wise learning-rate decay: block i of L gets lr * 0.75 ** (L - i), the heads the full lr
del opt
blocks = len(model.vit.blocks)
groups = []
for i, blk in enumerate(model.vit.blocks):
    groups.append({"params": list(blk.parameters()), "lr": 1e-4 * 0.75 ** (blocks - i)})
stem = [p for n, p in model.vit.named_parameters() if not n.startswith("blocks.")]
groups.append({"params": stem, "lr": 1e-4 * 0.75 ** (blocks + 1)})
groups.append({"params": [p for n, p in model.named_parameters() if not n.startswith("vit.")], "lr": 1e-4})
opt = torch.optim.AdamW(groups, weight_decay=0.05, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
model.vit.set_grad_checkpointing(True)
model.train()
for step in range(2):
    loss, _ = loss_fn(model, batch(BATCH // 2, H * 3 // 2, W * 3 // 2), torch.float16)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"1536 checkpointed step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("1536x1152 checkpointed fp16")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
