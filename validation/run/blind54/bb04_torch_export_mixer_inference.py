"""An MLP-Mixer (12 layers, width 768, 196 patches) exported with `torch.export.export` and served:
the exported program's `module()` moved to the GPU and run under `inference_mode` on batches of 256
and 512 images of 224x224 in fp16 (the export traced at batch 256 with a dynamic batch dimension);
3 phases."""

import os

import torch
import torch.nn as nn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5404)
L, D, IMG, P, BS = (1, 32, 32, 16, (2, 4)) if SMALL else (12, 768, 224, 16, (256, 512))
N = (IMG // P) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.tokens = nn.Sequential(nn.Linear(N, 384), nn.GELU(), nn.Linear(384, N))
        self.channels = nn.Sequential(nn.Linear(D, 3072), nn.GELU(), nn.Linear(3072, D))

    def forward(self, x):
        x = x + self.tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channels(self.norm2(x))


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, D, P, stride=P)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(L)])
        self.head = nn.Linear(D, 1000)

    def forward(self, img):
        x = self.stem(img).flatten(2).transpose(1, 2)
        return self.head(self.blocks(x).mean(1))


model = Mixer().eval()
batch = torch.export.Dim("batch", min=1, max=1024)
exported = torch.export.export(model, (torch.randn(BS[0], 3, IMG, IMG),), dynamic_shapes=({0: batch},))
served = exported.module().to(device, torch.float16)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    for b in BS:
        out = served(torch.randn(b, 3, IMG, IMG, device=device, dtype=torch.float16))
        del out
        if device == "cuda":
            print(
                f"batch {b} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
