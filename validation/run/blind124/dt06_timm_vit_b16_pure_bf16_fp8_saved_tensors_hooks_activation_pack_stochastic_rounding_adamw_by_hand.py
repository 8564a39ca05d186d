"""Pure bf16 training of a timm ViT-B/16 (no weights, fused attention) with two memory recipes
written by hand: a `saved_tensors_hooks` pair that packs every saved bf16 activation of 64K
elements or more (not the parameters) to float8_e4m3fn with a per-tensor amax scale and unpacks
it back to bf16 in backward, and an AdamW kept in fp32 moments whose bf16 weight update is
stochastically rounded (random 16-bit noise added to the fp32 bit pattern through an int32 view
before truncation); one plain bf16 step at batch 128 for comparison, three packed steps at batch
192, then an evaluation; 6 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12406)
device = "cuda" if torch.cuda.is_available() else "cpu"
E4M3 = torch.float8_e4m3fn
FMAX = torch.finfo(E4M3).max
if SMALL:
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=10)
    S, NC, B_PLAIN, B_PACKED = 64, 10, 4, 6
else:
    model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000)
    S, NC, B_PLAIN, B_PACKED = 224, 1000, 128, 192
model = model.to(device=device, dtype=torch.bfloat16)
params = [p for p in model.parameters() if p.requires_grad]


class SRAdamW:
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, wd=0.05):
        self.params, self.lr, self.betas, self.eps, self.wd = params, lr, betas, eps, wd
        self.m = [torch.zeros_like(p, dtype=torch.float32) for p in params]
        self.v = [torch.zeros_like(p, dtype=torch.float32) for p in params]
        self.t = 0

    @torch.no_grad()
    def step(self):
        self.t += 1
        b1, b2 = self.betas
        c1, c2 = 1 - b1**self.t, 1 - b2**self.t
        for p, m, v in zip(self.params, self.m, self.v, strict=True):
            g = p.grad.float()
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            w = p.float()
            w.mul_(1 - self.lr * self.wd)
            w.addcdiv_(m / c1, (v / c2).sqrt_().add_(self.eps), value=-self.lr)
            bits = w.view(torch.int32)
            bits.add_(torch.randint_like(bits, 0, 1 << 16)).bitwise_and_(-65536)
            p.copy_(w)

    def zero_grad(self):
        for p in self.params:
            p.grad = None


def pack(t):
    if t.dtype != torch.bfloat16 or t.numel() < 65536 or isinstance(t, torch.nn.Parameter):
        return t
    scale = t.abs().amax().float().clamp(min=1e-12) / FMAX
    return (t.float() / scale).to(E4M3), scale


def unpack(x):
    if isinstance(x, tuple):
        t8, scale = x
        return (t8.float() * scale).to(torch.bfloat16)
    return x


opt = SRAdamW(params)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(4):
    packed = step > 0
    b = B_PACKED if packed else B_PLAIN
    x = torch.randn(b, 3, S, S, device=device, dtype=torch.bfloat16)
    y = torch.randint(0, NC, (b,), device=device)
    if packed:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = F.cross_entropy(model(x).float(), y, label_smoothing=0.1)
    else:
        loss = F.cross_entropy(model(x).float(), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        print(
            f"step {step} packed {packed} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del x, y, loss

model.eval()
with torch.no_grad():
    x = torch.randn(256 if not SMALL else 8, 3, S, S, device=device, dtype=torch.bfloat16)
    top = model(x).float().softmax(-1).amax(-1).mean()
if device == "cuda":
    print(
        f"eval conf {top.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
