"""SmoothQuant W8A8 inference of a hand-written pre-norm transformer encoder in fp16 (12 layers of
width 1024, 16 heads through SDPA, MLP 4096, a 2-class pooled classifier), the way the SmoothQuant
recipe is written without a library. Calibration: a forward pre-hook on every Linear keeps the
running per-input-channel amax of its input over 4 batches of 32 x 256 under inference_mode. Then
each Linear is replaced, one at a time, by a W8A8 module: smoothing factors
s = amax_x^0.5 / amax_w^0.5 (clamped), the weight multiplied by s and quantized per output channel
to int8 (fp16 scales), the input divided by s at run time and quantized per token to int8
(dynamic scales), the product by `torch._int_mm(x_int8, w_int8.t())` (int32), dequantized with the
outer product of the scales, plus the fp16 bias; with 16 or fewer tokens (which `_int_mm` refuses)
the module falls back to dequantizing the weight for `F.linear`. Serving: 64 x 256, then 128 x 128,
then a single 16-token request. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(25604)
V, D, L, H, FF = 30522, 1024, 12, 16, 4096


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.out = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, FF), nn.Linear(FF, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(512, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.nf = nn.LayerNorm(D)
        self.cls = nn.Linear(D, 2)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))
        for layer in self.layers:
            x = layer(x)
        return self.cls(self.nf(x).mean(1))


class W8A8Linear(nn.Module):
    def __init__(self, lin, act_amax, alpha=0.5):
        super().__init__()
        w = lin.weight.detach()
        w_amax = w.abs().amax(0).float().clamp(min=1e-5)
        s = (act_amax.float().clamp(min=1e-5).pow(alpha) / w_amax.pow(1 - alpha)).clamp(min=1e-5)
        ws = w.float() * s
        scale = ws.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127
        self.register_buffer("w_int8", (ws / scale).round().clamp(-127, 127).to(torch.int8))
        self.register_buffer("w_scale", scale.t().to(torch.float16))
        self.register_buffer("smooth", s.to(torch.float16))
        self.register_buffer("bias", lin.bias.detach().clone())

    def forward(self, x):
        shape = x.shape
        x2 = (x.reshape(-1, shape[-1]) / self.smooth).to(torch.float16)
        if x2.size(0) <= 16:
            w = self.w_int8.to(torch.float16) * self.w_scale.t()
            return F.linear(x2, w, self.bias).reshape(*shape[:-1], -1)
        x_scale = x2.abs().amax(-1, keepdim=True).float().clamp(min=1e-8) / 127
        xq = (x2 / x_scale).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, self.w_int8.t())
        y = (acc.float() * x_scale * self.w_scale.float()).to(torch.float16) + self.bias
        return y.reshape(*shape[:-1], -1)


model = Encoder().cuda().half().eval()
amax = {}


def observe(name):
    def hook(mod, args):
        a = args[0].detach().reshape(-1, args[0].shape[-1]).abs().amax(0)
        amax[name] = torch.maximum(amax[name], a) if name in amax else a

    return hook


hooks = [
    m.register_forward_pre_hook(observe(n))
    for n, m in model.named_modules()
    if isinstance(m, nn.Linear) and n != "cls"
]
with torch.inference_mode():
    for _ in range(4):
        model(torch.randint(0, V, (32, 256), device="cuda"))
for h in hooks:
    h.remove()
report("fp16 model and calibration")

for layer_idx, layer in enumerate(model.layers):
    for name in ("qkv", "out", "fc1", "fc2"):
        key = f"layers.{layer_idx}.{name}"
        setattr(layer, name, W8A8Linear(getattr(layer, name), amax.pop(key)))
torch.cuda.empty_cache()
report("W8A8 quantized")

with torch.inference_mode():
    for b, t in ((64, 256), (128, 128), (1, 16)):
        logits = model(torch.randint(0, V, (b, t), device="cuda"))
        print(tuple(logits.shape), logits.dtype)
        del logits
        report(f"serve {b}x{t}")
