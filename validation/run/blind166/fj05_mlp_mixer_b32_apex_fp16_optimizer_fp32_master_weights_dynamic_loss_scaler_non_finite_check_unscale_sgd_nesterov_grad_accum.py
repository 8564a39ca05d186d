"""An MLP-Mixer trained with an fp16 master-weight scheme written by hand after NVIDIA apex's
FP16_Optimizer (apex/fp16_utils: the model converted with `.half()` except its LayerNorms, which
stay fp32 as `network_to_half`/BN-safe conversion keeps normalization in fp32; an fp32 master copy of
every fp16 parameter; `model_grads_to_master_grads`, `master_params_to_model_params`) and its
DynamicLossScaler (loss times the scale before backward; the fp16 gradients copied into the fp32
master gradients, then unscaled and checked for inf/nan by `torch._amp_foreach_non_finite_check_and_unscale_`;
the step skipped and the scale halved on overflow, doubled after 2 clean steps), gradient-norm
clipping of the masters at 5.0 and SGD with Nesterov momentum over the masters; the updated masters
copied back into the fp16 weights by `torch._foreach_copy_`. Mixer-B/32 as timm's MlpMixer builds it
(32 x 32 Conv2d stem, 12 blocks of width 768, token MLP 384 over 49 patches, channel MLP 3,072,
1,000 classes), batch 256 at 224 x 224 in two micro-batches of 128 accumulated; 3 steps (each its
own phase) and an fp16 no_grad evaluation of 512 images in batches of 256; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16605)
if SMALL:
    IMG, PATCH, C, LAYERS, TOK_H, CH_H, CLASSES, MICRO, ACCUM, EVAL = 64, 16, 64, 2, 32, 128, 10, 4, 2, 8
else:
    IMG, PATCH, C, LAYERS, TOK_H, CH_H, CLASSES, MICRO, ACCUM, EVAL = (
        224,
        32,
        768,
        12,
        384,
        3072,
        1000,
        128,
        2,
        512,
    )
N_TOK = (IMG // PATCH) ** 2
device = "cuda" if torch.cuda.is_available() else "cpu"
half = torch.float16 if device == "cuda" else torch.bfloat16


class Mlp(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class FP32LayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.float()).to(x.dtype)


class MixerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1 = FP32LayerNorm(C, eps=1e-6)
        self.mlp_tokens = Mlp(N_TOK, TOK_H)
        self.norm2 = FP32LayerNorm(C, eps=1e-6)
        self.mlp_channels = Mlp(C, CH_H)

    def forward(self, x):
        x = x + self.mlp_tokens(self.norm1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.mlp_channels(self.norm2(x))


class MlpMixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, C, PATCH, PATCH)
        self.blocks = nn.Sequential(*[MixerBlock() for _ in range(LAYERS)])
        self.norm = FP32LayerNorm(C, eps=1e-6)
        self.head = nn.Linear(C, CLASSES)

    def forward(self, x):
        x = self.stem(x).flatten(2).transpose(1, 2)
        x = self.norm(self.blocks(x))
        return self.head(x.mean(1))


def network_to_half(model):
    for m in model.modules():
        if not isinstance(m, nn.LayerNorm):
            for p in m.parameters(recurse=False):
                p.data = p.data.to(half)
    return model


class DynamicLossScaler:
    def __init__(self, init_scale=2.0**10, scale_factor=2.0, scale_window=2):
        self.cur_scale, self.scale_factor, self.scale_window = init_scale, scale_factor, scale_window
        self.last_overflow_iter, self.cur_iter = -1, 0

    def update_scale(self, overflow):
        if overflow:
            self.cur_scale = max(self.cur_scale / self.scale_factor, 1.0)
            self.last_overflow_iter = self.cur_iter
        elif (self.cur_iter - self.last_overflow_iter) % self.scale_window == 0:
            self.cur_scale *= self.scale_factor
        self.cur_iter += 1


class FP16_Optimizer:
    def __init__(self, model, lr=0.1, momentum=0.9, weight_decay=5e-5):
        self.model_params = [p for p in model.parameters() if p.requires_grad]
        self.master_params = []
        for p in self.model_params:
            master = p.detach().clone().float()
            master.requires_grad = True
            self.master_params.append(master)
        self.optimizer = torch.optim.SGD(
            self.master_params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay
        )
        self.loss_scaler = DynamicLossScaler()
        self.found_inf = torch.zeros(1, device=device)
        self.overflows = 0

    def backward(self, loss):
        (loss.float() * self.loss_scaler.cur_scale).backward()

    def model_grads_to_master_grads(self):
        for model, master in zip(self.model_params, self.master_params, strict=True):
            if master.grad is None:
                master.grad = torch.empty_like(master)
            master.grad.copy_(model.grad)

    @torch.no_grad()
    def step(self, clip=5.0):
        self.model_grads_to_master_grads()
        self.found_inf.zero_()
        inv_scale = torch.full((1,), 1.0 / self.loss_scaler.cur_scale, device=device)
        grads = [m.grad for m in self.master_params]
        torch._amp_foreach_non_finite_check_and_unscale_(grads, self.found_inf, inv_scale)
        overflow = bool(self.found_inf.item())
        self.loss_scaler.update_scale(overflow)
        if overflow:
            self.overflows += 1
            return None
        norm = nn.utils.clip_grad_norm_(self.master_params, clip)
        self.optimizer.step()
        torch._foreach_copy_(self.model_params, self.master_params)
        return norm

    def zero_grad(self):
        for p in self.model_params:
            p.grad = None


model = network_to_half(MlpMixer().to(device))
optimizer = FP16_Optimizer(model)
gen = torch.Generator(device=device).manual_seed(16605)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    optimizer.zero_grad()
    for _micro in range(ACCUM):
        images = torch.randn(MICRO, 3, IMG, IMG, device=device, generator=gen).to(half)
        labels = torch.randint(0, CLASSES, (MICRO,), device=device, generator=gen)
        logits = model(images)
        loss = F.cross_entropy(logits.float(), labels) / ACCUM
        optimizer.backward(loss)
    norm = optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item() * ACCUM:.3f} scale {optimizer.loss_scaler.cur_scale}"
            f" overflows {optimizer.overflows} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
correct = 0
with torch.no_grad():
    for _ in range(EVAL // (2 * MICRO)):
        images = torch.randn(2 * MICRO, 3, IMG, IMG, device=device, generator=gen).to(half)
        labels = torch.randint(0, CLASSES, (2 * MICRO,), device=device, generator=gen)
        correct += (model(images).argmax(-1) == labels).sum()
if device == "cuda":
    print(
        f"eval correct {int(correct)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
