"""CLIP trained from scratch, written after mlfoundations/open_clip's training loop: the image
tower a timm VisionTransformer ViT-B/32 at 224 (pre-norm, class token, a 512-wide head as the
projection), the text tower written by hand (a 49,408-token embedding, learned positions over 77
tokens, 12 nn.TransformerEncoderLayer blocks of width 512, norm_first, GELU, batch_first, the
causal mask, the features taken at each sequence's end-of-text token found by `argmax` and
projected by a 512 x 512 matrix), a learned logit scale clamped at 100; batch 1,024 in fp16
autocast with GradScaler and AdamW(fused=True) (gains, biases, the embeddings and the logit scale
without decay), the contrastive loss over in-batch pairs plus the negatives of a cross-batch
memory (the detached, normalised features of up to 3 previous batches concatenated: logits of
1,024 x 1,024, 2,048 and 3,072 over the steps, fp32), gradient clipping after unscale_; 3 steps;
then zero-shot classification in eval mode under no_grad: 1,000 classes x 4 templates of text
embedded in chunks of 1,000, averaged per class, and 2,048 images at batch 512 scored against
them; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13604)
if SMALL:
    B, IMG, CTX, VOCAB, W, L, H, N_CLS, N_TPL, N_IMG, EB = 8, 64, 16, 1000, 64, 2, 2, 10, 2, 16, 8
    vit = dict(embed_dim=96, depth=2, num_heads=2)
else:
    B, IMG, CTX, VOCAB, W, L, H, N_CLS, N_TPL, N_IMG, EB = (
        1024,
        224,
        77,
        49408,
        512,
        12,
        8,
        1000,
        4,
        2048,
        512,
    )
    vit = dict(embed_dim=768, depth=12, num_heads=12)
EMBED, MEM_BATCHES = 512 if not SMALL else 32, 3
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class TextTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, W)
        self.positional_embedding = nn.Parameter(torch.empty(CTX, W).normal_(std=0.01))
        layer = nn.TransformerEncoderLayer(
            W, H, 4 * W, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.transformer = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.ln_final = nn.LayerNorm(W)
        self.text_projection = nn.Parameter(torch.empty(W, EMBED).normal_(std=W**-0.5))
        self.register_buffer(
            "attn_mask", nn.Transformer.generate_square_subsequent_mask(CTX), persistent=False
        )

    def forward(self, text):
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x, mask=self.attn_mask, is_causal=True)
        x = self.ln_final(x)
        x = x[torch.arange(x.shape[0], device=x.device), text.argmax(dim=-1)]
        return x @ self.text_projection


class CLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = VisionTransformer(
            img_size=IMG, patch_size=32, num_classes=EMBED, global_pool="token", pre_norm=True, **vit
        )
        self.text = TextTransformer()
        self.logit_scale = nn.Parameter(torch.ones([]) * 2.6592)

    def forward(self, image, text):
        return (
            F.normalize(self.visual(image), dim=-1),
            F.normalize(self.text(text), dim=-1),
            self.logit_scale.exp(),
        )


def make_text(n):
    t = torch.randint(1, VOCAB - 1, (n, CTX), device=device)
    lengths = torch.randint(5, CTX, (n,), device=device)
    pos = torch.arange(CTX, device=device)
    t = torch.where(pos[None] < lengths[:, None], t, 0)
    t.scatter_(1, lengths[:, None], VOCAB - 1)
    return t


model = CLIP().to(device)
decay, no_decay = [], []
for n, p in model.named_parameters():
    (
        no_decay
        if p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n or "embed" in n
        else decay
    ).append(p)
optimizer = torch.optim.AdamW(
    [{"params": no_decay, "weight_decay": 0.0}, {"params": decay, "weight_decay": 0.2}],
    lr=5e-4,
    betas=(0.9, 0.98),
    eps=1e-6,
    fused=True,
)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
mem_img, mem_txt = [], []
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
labels = torch.arange(B, device=device)
for step in range(3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    texts = make_text(B)
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        img_f, txt_f, logit_scale = model(images, texts)
    img_all = torch.cat([img_f.float(), *mem_img])
    txt_all = torch.cat([txt_f.float(), *mem_txt])
    logits_per_image = logit_scale * img_f.float() @ txt_all.T
    logits_per_text = logit_scale * txt_f.float() @ img_all.T
    loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    with torch.no_grad():
        model.logit_scale.clamp_(0, 4.6052)
    mem_img = ([img_f.detach().float(), *mem_img])[:MEM_BATCHES]
    mem_txt = ([txt_f.detach().float(), *mem_txt])[:MEM_BATCHES]
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} logits {tuple(logits_per_image.shape)}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del img_f, txt_f, img_all, txt_all, logits_per_image, logits_per_text, loss
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    texts = make_text(N_CLS * N_TPL)
    class_emb = []
    for i in range(0, texts.shape[0], 1000):
        class_emb.append(F.normalize(model.text(texts[i : i + 1000]), dim=-1))
    class_emb = torch.cat(class_emb).view(N_CLS, N_TPL, -1).mean(1)
    class_emb = F.normalize(class_emb, dim=-1).T
    correct = torch.zeros((), device=device, dtype=torch.long)
    for _ in range(0, N_IMG, EB):
        y = torch.randint(0, N_CLS, (EB,), device=device)
        f = F.normalize(model.visual(torch.randn(EB, 3, IMG, IMG, device=device)), dim=-1)
        correct += ((100.0 * f @ class_emb).topk(5, dim=-1).indices == y[:, None]).any(-1).sum()
if device == "cuda":
    print(
        f"zero-shot top5 {correct.item()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
