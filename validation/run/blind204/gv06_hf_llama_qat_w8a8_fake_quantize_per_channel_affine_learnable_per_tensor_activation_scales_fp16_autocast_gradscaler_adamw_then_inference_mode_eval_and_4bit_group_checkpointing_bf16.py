"""Quantization-aware training of a Hugging Face LlamaForCausalLM built from a LlamaConfig (random init,
nothing downloaded): W8A8 fake quantization of every projection, then a 4-bit group-wise weight variant.

Model: LlamaConfig(hidden 1024, intermediate 2816, 12 layers, 16 heads with 4 key/value heads, vocabulary
32,000, SDPA attention), fp32 weights. Every q/k/v/o/gate/up/down projection is replaced by a QATLinear
keeping the same weight: the weight is fake-quantized per output channel to int8 with
torch.fake_quantize_per_channel_affine (symmetric, scale max|w| / 127 recomputed each forward and
detached); the input activation is fake-quantized per tensor with a learnable scale (LSQ-like) through
torch._fake_quantize_learnable_per_tensor_affine (int8 -128..127, grad_factor 1 / sqrt(numel * 127),
computed in fp32 and cast back), its scale initialised from the first batch.

Training: fp16 autocast with torch.amp.GradScaler (unscale_, clip at 1.0, step, update), AdamW (foreach
default; lr 2e-4, weight decay 0.01), batch 8 x 1024 tokens, labels = input_ids (the model's shifted loss).

Variant: the weights' fake quantization switches to 4 bits in groups of 128 input features (the same op on
the weight viewed as (-1, 128)); gradient checkpointing on (model.gradient_checkpointing_enable,
non-reentrant), bf16 autocast, a new fused AdamW, batch 8.

Phases: the first step; 3 more steps; evaluation loss under inference_mode; the first 4-bit step (new
optimizer state); 2 more. 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2046)
if SMALL:
    cfg = dict(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    VOCAB, CTX, BATCH = 512, 64, 2
else:
    cfg = dict(
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
    )
    VOCAB, CTX, BATCH = 32000, 1024, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class QATLinear(nn.Linear):
    def __init__(self, lin):
        super().__init__(lin.in_features, lin.out_features, bias=lin.bias is not None)
        self.weight = lin.weight
        self.bias = lin.bias
        self.act_scale = nn.Parameter(torch.ones(1))
        self.register_buffer("act_zero", torch.zeros(1))
        self.act_init = False
        self.w_bits, self.group = 8, None

    def quant_weight(self):
        w = self.weight
        qmax = 2 ** (self.w_bits - 1) - 1
        wv = w if self.group is None else w.reshape(-1, self.group)
        scale = (wv.detach().abs().amax(dim=1) / qmax).clamp(min=1e-8)
        zero = torch.zeros(wv.shape[0], dtype=torch.int32, device=w.device)
        wq = torch.fake_quantize_per_channel_affine(wv, scale, zero, 0, -qmax - 1, qmax)
        return wq.reshape(w.shape)

    def forward(self, x):
        if not self.act_init:
            with torch.no_grad():
                self.act_scale.copy_(2 * x.detach().abs().float().mean() / math.sqrt(127))
            self.act_init = True
        grad_factor = 1.0 / math.sqrt(x.numel() * 127)
        xq = torch._fake_quantize_learnable_per_tensor_affine(
            x.float(), self.act_scale, self.act_zero, -128, 127, grad_factor
        ).to(x.dtype)
        return F.linear(xq, self.quant_weight(), self.bias)


config = LlamaConfig(vocab_size=VOCAB, max_position_embeddings=2048, attn_implementation="sdpa", **cfg)
model = LlamaForCausalLM(config)
for layer in model.model.layers:
    for parent, names in (
        (layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
        (layer.mlp, ("gate_proj", "up_proj", "down_proj")),
    ):
        for n in names:
            setattr(parent, n, QATLinear(getattr(parent, n)))
model = model.to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler("cuda", enabled=amp)


def fp16_step():
    ids = torch.randint(0, VOCAB, (BATCH, CTX), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = model(input_ids=ids, labels=ids).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {fp16_step():.4f} scale {scaler.get_scale()}")
report("first step")
for _ in range(3):
    loss = fp16_step()
print(f"step 3 loss {loss:.4f} scale {scaler.get_scale()}")
report("w8a8 train")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    ids = torch.randint(0, VOCAB, (BATCH, CTX), device=device)
    eval_loss = model(input_ids=ids, labels=ids).loss.item()
print(f"eval loss {eval_loss:.4f} ppl {math.exp(eval_loss):.1f}")
report("eval")

del opt, scaler
for m in model.modules():
    if isinstance(m, QATLinear):
        m.w_bits, m.group = 4, 128 if not SMALL else 64
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=device == "cuda")


def bf16_step():
    ids = torch.randint(0, VOCAB, (BATCH, CTX), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"w4 step 0 loss {bf16_step():.4f}")
report("w4 first step")
for _ in range(2):
    loss = bf16_step()
print(f"w4 step 2 loss {loss:.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
