"""SmoothQuant W8A8 for HF BERT-large (built from `BertConfig`, fp16) written by
hand with `torch._int_mm`: a calibration pass of 4 batches under forward pre-hooks that keep each
Linear's per-input-channel activation amax, smoothing factors (alpha 0.5) folded into the
weights, every encoder Linear replaced by a W8A8 module (int8 weight with per-output-channel
scales, activations quantized per token at each call, int32 accumulation rescaled to fp16 plus
the bias), then classification of 64 x 512 and 256 x 128 token batches under inference_mode and
the fp16 model's logits compared on the last; 5 phases."""

import os

import torch
import torch.nn as nn
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12403)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    cfg = BertConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512, num_labels=3
    )
else:
    cfg = BertConfig(
        hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, num_labels=3
    )
model = BertForSequenceClassification(cfg).to(device=device, dtype=torch.float16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

act_amax = {}


def observe(name):
    def hook(mod, args):
        a = args[0].detach().reshape(-1, args[0].shape[-1]).abs().amax(0).float()
        act_amax[name] = torch.maximum(act_amax[name], a) if name in act_amax else a

    return hook


linears = {n: m for n, m in model.bert.encoder.named_modules() if isinstance(m, nn.Linear)}
handles = [m.register_forward_pre_hook(observe(n)) for n, m in linears.items()]
with torch.inference_mode():
    for _ in range(4):
        ids = torch.randint(
            1000, cfg.vocab_size, (16 if not SMALL else 2, 512 if not SMALL else 32), device=device
        )
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
for h in handles:
    h.remove()
if device == "cuda":
    print(
        f"calibrated {len(act_amax)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class W8A8Linear(nn.Module):
    def __init__(self, lin, amax, alpha=0.5):
        super().__init__()
        w = lin.weight.detach().float()
        s = (amax.clamp(min=1e-5).pow(alpha) / w.abs().amax(0).clamp(min=1e-5).pow(1 - alpha)).clamp(min=1e-5)
        w = w * s
        w_scale = w.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127
        self.register_buffer("w8", (w / w_scale).round().clamp(-128, 127).to(torch.int8))
        self.register_buffer("w_scale", w_scale.reshape(1, -1).to(torch.float16))
        self.register_buffer("inv_s", (1.0 / s).to(torch.float16))
        self.register_buffer("bias", lin.bias.detach().clone())

    def forward(self, x):
        shape = x.shape
        x = (x.reshape(-1, shape[-1]) * self.inv_s).contiguous()
        x_scale = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-8) / 127
        x8 = (x / x_scale).round().clamp(-128, 127).to(torch.int8)
        acc = torch._int_mm(x8, self.w8.t())
        y = (acc.float() * x_scale * self.w_scale.float()).to(torch.float16) + self.bias
        return y.reshape(*shape[:-1], -1)


ref = BertForSequenceClassification(cfg).to(device=device, dtype=torch.float16).eval()
ref.load_state_dict(model.state_dict())
for name, lin in linears.items():
    parent = model.bert.encoder.get_submodule(name.rsplit(".", 1)[0])
    setattr(parent, name.rsplit(".", 1)[1], W8A8Linear(lin, act_amax[name]))
del lin, linears
if device == "cuda":
    print(
        f"quantized {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

for b, t in ((4, 32), (8, 16)) if SMALL else ((64, 512), (256, 128)):
    ids = torch.randint(1000, cfg.vocab_size, (b, t), device=device)
    mask = torch.ones_like(ids)
    mask[: b // 2, t // 2 :] = 0
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits
        if t == (16 if SMALL else 128):
            ref_logits = ref(input_ids=ids, attention_mask=mask).logits
            agree = (logits.argmax(-1) == ref_logits.argmax(-1)).float().mean()
        else:
            agree = torch.ones(())
    if device == "cuda":
        print(
            f"serve {b}x{t} agree {agree.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
