"""W8A8 int8 inference of an MLP-Mixer (Mixer-B/16 as timm's MlpMixer builds it: 16 x 16 Conv2d
stem, 12 mixer blocks of width 768 with token MLP 384 and channel MLP 3072, GELU, average pooling,
1,000-class head) in fp16, quantized by hand after SmoothQuant / torchao's
int8_dynamic_activation_int8_weight: each nn.Linear whose in and out features are multiples of 8
(the channel MLPs and the head) becomes an Int8DynamicLinear: weights quantized per output channel
(absmax / 127, round, clamp) and stored transposed (the column-major int8 operand), activations
quantized per token on the fly, `torch._int_mm` to int32 and dequantized by the two scales to fp16;
a call with 16 rows or fewer (the head at a small batch) falls back to dequantizing the weight on
the fly. The token-mixing linears (196 patches, not a multiple of 8) become weight-only int8 with
per-channel scales, dequantized on the fly before an fp16 F.linear. Phases: build the fp16 model;
the fp16 reference evaluation of 256 images (logits kept); quantize in place; the int8 evaluation
of the same 256 images with top-1 agreement and the logits' error against fp16; a small-batch int8
evaluation of 8 images under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16604)
if SMALL:
    IMG, PATCH, C, LAYERS, TOK_H, CH_H, CLASSES, B, B_SMALL = 32, 8, 64, 2, 32, 128, 16, 24, 2
else:
    IMG, PATCH, C, LAYERS, TOK_H, CH_H, CLASSES, B, B_SMALL = 224, 16, 768, 12, 384, 3072, 1000, 256, 8
N_TOK = (IMG // PATCH) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


class Mlp(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(d, h), nn.GELU(), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = nn.LayerNorm(C, eps=1e-6)
        self.mlp_tokens = Mlp(N_TOK, TOK_H)
        self.norm2 = nn.LayerNorm(C, eps=1e-6)
        self.mlp_channels = Mlp(C, CH_H)

    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.mlp_channels(self.norm2(x))


class MlpMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, C, PATCH, PATCH)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(C, eps=1e-6)
        self.head = nn.Linear(C, CLASSES)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = self.norm(self.blocks(x))
        return self.head(x.mean(1))


def quantize_per_channel(w):
    scale = w.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-5) / 127
    q = torch.clamp(torch.round(w.float() / scale), -128, 127).to(torch.int8)
    return q, scale


class Int8DynamicLinear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        q, scale = quantize_per_channel(lin.weight.detach())
        self.register_buffer("wq_t", q.t())
        self.register_buffer("w_scale", scale.t().to(dtype))
        self.register_buffer("bias", lin.bias.detach().clone() if lin.bias is not None else None)

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[0] <= 16:
            w = self.wq_t.t().to(x.dtype) * self.w_scale.t()
            return F.linear(x, w, self.bias)
        x_scale = rows.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-5) / 127
        xq = torch.clamp(torch.round(rows.float() / x_scale), -128, 127).to(torch.int8)
        y = torch._int_mm(xq, self.wq_t)
        y = (y.float() * x_scale * self.w_scale.float()).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], -1)


class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        q, scale = quantize_per_channel(lin.weight.detach())
        self.register_buffer("weight", q)
        self.register_buffer("scales", scale.squeeze(1).to(dtype))
        self.register_buffer("bias", lin.bias.detach().clone())

    def forward(self, x):
        return F.linear(x, self.weight.to(x.dtype) * self.scales[:, None], self.bias)


@torch.no_grad()
def quantize_(module):
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            if child.in_features % 8 == 0 and child.out_features % 8 == 0:
                setattr(module, name, Int8DynamicLinear(child))
            else:
                setattr(module, name, Int8WeightOnlyLinear(child))
        else:
            quantize_(child)


model = MlpMixer().to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"fp16 model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
images = torch.randn(B, 3, IMG, IMG, device=device, dtype=dtype)
with torch.no_grad():
    ref = model(images)
if device == "cuda":
    print(f"fp16 eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
quantize_(model)
if device == "cuda":
    print(f"int8 model {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.no_grad():
    out = model(images)
    agree = (out.argmax(-1) == ref.argmax(-1)).float().mean()
    err = (out.float() - ref.float()).abs().max()
if device == "cuda":
    print(
        f"int8 eval agree {agree.item():.3f} err {err.item():.3e} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del images, ref, out
with torch.inference_mode():
    small = torch.randn(B_SMALL, 3, IMG, IMG, device=device, dtype=dtype)
    pred = model(small).softmax(-1).topk(5)
if device == "cuda":
    print(
        f"small batch top5 {tuple(pred.indices.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
