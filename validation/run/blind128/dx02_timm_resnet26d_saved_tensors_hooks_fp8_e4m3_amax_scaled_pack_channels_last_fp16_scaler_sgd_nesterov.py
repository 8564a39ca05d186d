"""A timm ResNet-26-D (deep stem, average-pool shortcuts; 1,000 classes) in channels_last trained at
batch 96 x 224 x 224 under fp16 autocast with GradScaler and SGD (momentum, Nesterov): one step as it
is, then two steps under custom torch.autograd.graph.saved_tensors_hooks that pack every 4-d saved
tensor of 65,536 elements or more as float8_e4m3fn scaled by its absolute maximum (the scale and
dtype kept beside it) and unpack it back to its dtype; then an inference_mode evaluation; 5 phases."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12802)
B, IMG = (4, 64) if SMALL else (96, 224)
device = "cuda" if torch.cuda.is_available() else "cpu"
model = timm.create_model("resnet26d", num_classes=1000).to(device, memory_format=torch.channels_last)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
scaler = torch.amp.GradScaler(device)
FP8_MAX = torch.finfo(torch.float8_e4m3fn).max


def pack(t):
    if t.dim() != 4 or t.numel() < 65536 or not t.is_floating_point():
        return t
    scale = t.detach().abs().amax().float().clamp(min=1e-12) / FP8_MAX
    q = (t.detach() / scale.to(t.dtype)).to(torch.float8_e4m3fn)
    return q, scale, t.dtype


def unpack(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    q, scale, dtype = packed
    return q.to(dtype) * scale.to(dtype)


def step(compress):
    x = torch.randn(B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (B,), device=device)
    with torch.autocast(device, dtype=torch.float16):
        if compress:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for name, compress in (("plain", False), ("fp8 saved 0", True), ("fp8 saved 1", True)):
    loss = step(compress)
    if device == "cuda":
        print(
            f"{name} loss {loss:.3f} allocated {torch.cuda.memory_allocated()}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    x = torch.randn(2 * B, 3, IMG, IMG, device=device).contiguous(memory_format=torch.channels_last)
    top5 = model(x).float().softmax(-1).topk(5).indices
if device == "cuda":
    print(
        f"eval {tuple(top5.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke eval {tuple(top5.shape)}")
