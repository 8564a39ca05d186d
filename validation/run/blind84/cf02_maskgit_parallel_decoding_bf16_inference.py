"""MaskGIT class-conditional image generation, inference only, bf16 weights: a bidirectional
`nn.TransformerEncoder` (12 layers, 768 wide, pre-norm, GELU) over 16x16 VQ tokens plus a class
token, 8 parallel decoding steps with a cosine mask schedule, classifier-free guidance (conditional
and null-class halves in one batch), multinomial sampling, confidences by `gather`, re-masking of the
least confident by a sorted threshold; then a conv VQ decoder (GroupNorm, SiLU, nearest upsampling)
from the 1,024-entry codebook to 256x256 images; batch 32 under inference_mode; 2 phases."""

import math
import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8402)
if SMALL:
    D, LAYERS, HEADS, G, CODES, CLASSES, B, STEPS, CH = 32, 2, 2, 4, 64, 10, 2, 3, (16, 8)
else:
    D, LAYERS, HEADS, G, CODES, CLASSES, B, STEPS, CH = 768, 12, 12, 16, 1024, 1000, 32, 8, (256, 128)
MASK = CODES
T = G * G


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(CODES + 1, D)
        self.cls = nn.Embedding(CLASSES + 1, D)
        self.pos = nn.Parameter(torch.randn(1, T + 1, D) * 0.02)
        layer = nn.TransformerEncoderLayer(D, HEADS, 4 * D, 0.0, "gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, CODES)

    def forward(self, tokens, labels):
        x = torch.cat([self.cls(labels).unsqueeze(1), self.tok(tokens)], 1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 1:])


def up(i, o):
    return nn.Sequential(
        nn.GroupNorm(32 if i >= 32 else 4, i),
        nn.SiLU(),
        nn.Upsample(scale_factor=2),
        nn.Conv2d(i, o, 3, padding=1),
    )


device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
gen = Generator().to(device=device, dtype=dtype).eval()
codebook = nn.Embedding(CODES, CH[0]).to(device=device, dtype=dtype)
decoder = (
    nn.Sequential(
        nn.Conv2d(CH[0], CH[0], 3, padding=1),
        up(CH[0], CH[0]),
        up(CH[0], CH[1]),
        up(CH[1], CH[1]),
        up(CH[1], CH[1]),
        nn.GroupNorm(4, CH[1]),
        nn.SiLU(),
        nn.Conv2d(CH[1], 3, 3, padding=1),
    )
    .to(device=device, dtype=dtype)
    .eval()
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
labels = torch.randint(0, CLASSES, (B,), device=device)
null = torch.full((B,), CLASSES, device=device)
with torch.inference_mode():
    tokens = torch.full((B, T), MASK, device=device)
    for step in range(STEPS):
        logits = gen(tokens.repeat(2, 1), torch.cat([labels, null])).float()
        cond, uncond = logits.chunk(2)
        logits = uncond + 3.0 * (cond - uncond)
        probs = logits.softmax(-1)
        sampled = torch.multinomial(probs.view(-1, CODES), 1).view(B, T)
        conf = torch.gather(probs, -1, sampled.unsqueeze(-1)).squeeze(-1)
        masked = tokens == MASK
        sampled = torch.where(masked, sampled, tokens)
        conf = torch.where(masked, conf, torch.full_like(conf, float("inf")))
        n = math.floor(math.cos(math.pi / 2 * (step + 1) / STEPS) * T)
        if n > 0:
            thresh = conf.sort(dim=-1).values[:, n - 1 : n]
            tokens = torch.where(conf <= thresh, torch.full_like(sampled, MASK), sampled)
        else:
            tokens = sampled
    if device == "cuda":
        print(f"decode peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
    z = codebook(tokens).view(B, G, G, CH[0]).permute(0, 3, 1, 2)
    images = decoder(z).clamp(-1, 1)
if device == "cuda":
    print(f"pixels peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
