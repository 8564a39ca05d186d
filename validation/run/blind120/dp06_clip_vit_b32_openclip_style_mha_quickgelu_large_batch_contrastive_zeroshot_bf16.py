"""CLIP ViT-B/32 written by hand after mlfoundations/open_clip's transformer.py and model.py: an image
tower (32 x 32 patch conv without bias, class token, 50 learned positions, ln_pre, 12 residual
attention blocks of width 768 with nn.MultiheadAttention(batch_first=True, need_weights=False),
QuickGELU MLPs, ln_post, a 768 -> 512 projection) and a text tower (49,408-token embedding, 77
positions, 12 blocks of width 512 under a float causal attn_mask of -inf, ln_final, pooling at the
argmax token, a 512 -> 512 projection), a learned logit scale clamped to log(100) after each step;
open_clip's ClipLoss (symmetric cross entropy over the batch) at a large batch of 768 pairs under
bf16 autocast, AdamW (betas 0.9/0.98, eps 1e-6) without weight decay on gains, biases, embeddings
and the logit scale, 3 steps; then a zero-shot classifier over 1,000 class prompts (encoded in
chunks of 250 and normalized) applied to 512 images with top-5 accuracy under no_grad; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12006)
B, NCLS, BE, CHUNK = (8, 20, 8, 10) if SMALL else (768, 1000, 512, 250)
VW, VL, TW, TL = (64, 2, 64, 2) if SMALL else (768, 12, 512, 12)
CTX, VOCAB, EMBED = 77, 49408, 512
device = "cuda" if torch.cuda.is_available() else "cpu"


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        orig_type = x.dtype
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.to(orig_type)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1 = LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, h, batch_first=True)
        self.ln_2 = LayerNorm(d)
        self.mlp = nn.Sequential()
        self.mlp.add_module("c_fc", nn.Linear(d, 4 * d))
        self.mlp.add_module("gelu", QuickGELU())
        self.mlp.add_module("c_proj", nn.Linear(4 * d, d))

    def attention(self, x, attn_mask=None):
        attn_mask = attn_mask.to(x.dtype) if attn_mask is not None else None
        return self.attn(x, x, x, need_weights=False, attn_mask=attn_mask)[0]

    def forward(self, x, attn_mask=None):
        x = x + self.attention(self.ln_1(x), attn_mask=attn_mask)
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, width, layers, heads):
        super().__init__()
        self.resblocks = nn.ModuleList([ResidualAttentionBlock(width, heads) for _ in range(layers)])

    def forward(self, x, attn_mask=None):
        for r in self.resblocks:
            x = r(x, attn_mask=attn_mask)
        return x


class VisionTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        scale = VW**-0.5
        self.conv1 = nn.Conv2d(3, VW, kernel_size=32, stride=32, bias=False)
        self.class_embedding = nn.Parameter(scale * torch.randn(VW))
        self.positional_embedding = nn.Parameter(scale * torch.randn(50, VW))
        self.ln_pre, self.ln_post = LayerNorm(VW), LayerNorm(VW)
        self.transformer = Transformer(VW, VL, VW // 64)
        self.proj = nn.Parameter(scale * torch.randn(VW, EMBED))

    def forward(self, x):
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
        x = torch.cat([self.class_embedding.view(1, 1, -1).expand(x.shape[0], -1, -1).to(x.dtype), x], dim=1)
        x = self.ln_pre(x + self.positional_embedding.to(x.dtype))
        x = self.transformer(x)
        return self.ln_post(x[:, 0]) @ self.proj


class CLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = VisionTransformer()
        self.token_embedding = nn.Embedding(VOCAB, TW)
        self.positional_embedding = nn.Parameter(torch.empty(CTX, TW).normal_(std=0.01))
        self.transformer = Transformer(TW, TL, TW // 64)
        self.ln_final = LayerNorm(TW)
        self.text_projection = nn.Parameter(torch.empty(TW, EMBED).normal_(std=TW**-0.5))
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))
        self.register_buffer(
            "attn_mask", torch.empty(CTX, CTX).fill_(float("-inf")).triu_(1), persistent=False
        )

    def encode_image(self, image, normalize=False):
        f = self.visual(image)
        return F.normalize(f, dim=-1) if normalize else f

    def encode_text(self, text, normalize=False):
        x = self.token_embedding(text) + self.positional_embedding
        x = self.transformer(x, attn_mask=self.attn_mask)
        x = self.ln_final(x)
        x = x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection
        return F.normalize(x, dim=-1) if normalize else x

    def forward(self, image, text):
        return self.encode_image(image, True), self.encode_text(text, True), self.logit_scale.exp()


def random_text(n):
    text = torch.randint(1, VOCAB - 2, (n, CTX), device=device)
    lengths = torch.randint(5, CTX, (n, 1), device=device)
    pos = torch.arange(CTX, device=device)[None]
    text = torch.where(pos == lengths, torch.full_like(text, VOCAB - 1), text)
    text = text.masked_fill(pos > lengths, 0)
    text[:, 0] = VOCAB - 2
    return text


model = CLIP().to(device)


def exclude(n, p):
    return p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n


named = list(model.named_parameters())
optimizer = torch.optim.AdamW(
    [
        {"params": [p for n, p in named if exclude(n, p)], "weight_decay": 0.0},
        {"params": [p for n, p in named if not exclude(n, p)], "weight_decay": 0.2},
    ],
    lr=5e-4,
    betas=(0.9, 0.98),
    eps=1e-6,
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    images = torch.randn(B, 3, 224, 224, device=device)
    texts = random_text(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        image_features, text_features, logit_scale = model(images, texts)
        logits_per_image = logit_scale * image_features @ text_features.T
        logits_per_text = logit_scale * text_features @ image_features.T
        labels = torch.arange(B, device=device, dtype=torch.long)
        loss = (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(100))
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, texts, image_features, text_features, logit_scale, logits_per_image, logits_per_text, loss

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    weights = []
    prompts = random_text(NCLS)
    for chunk in prompts.split(CHUNK):
        weights.append(model.encode_text(chunk, normalize=True))
    classifier = F.normalize(torch.cat(weights), dim=-1).T
    images = torch.randn(BE, 3, 224, 224, device=device)
    target = torch.randint(0, NCLS, (BE,), device=device)
    logits = 100.0 * model.encode_image(images, normalize=True) @ classifier
    pred = logits.topk(5, 1, True, True)[1].t()
    correct = pred.eq(target.view(1, -1).expand_as(pred))
    top5 = correct[:5].reshape(-1).float().sum(0, keepdim=True)
if device == "cuda":
    print(
        f"zeroshot top5 {top5.item():.0f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
