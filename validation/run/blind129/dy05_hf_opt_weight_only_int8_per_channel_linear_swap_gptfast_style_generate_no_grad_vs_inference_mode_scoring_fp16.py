"""Weight-only int8 by hand on an HF OPT decoder from OPTConfig (24 layers, 2,048 wide, 32 heads, FFN
8,192, vocabulary 50,272, fp16): every attention projection and FFN linear is quantized on the GPU
(fp32 absmax per output channel, round, clamp, int8 weight and fp16 scale) and swapped, layer by layer,
for a gpt-fast-style WeightOnlyInt8Linear (F.linear over the weight cast to fp16 per call, times the
scales, plus the bias); then greedy generate of a batch of 16 prompts of 512 tokens to 64 new tokens
under no_grad, the same under inference_mode, and scoring 8 sequences of 2,048 tokens with labels
(the loss) under inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import OPTConfig, OPTForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12905)
if SMALL:
    cfg = OPTConfig(
        vocab_size=512,
        hidden_size=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=256,
        word_embed_proj_dim=64,
    )
    B, T, NEW, SB, ST = 2, 24, 6, 2, 64
else:
    cfg = OPTConfig(
        vocab_size=50272,
        hidden_size=2048,
        ffn_dim=8192,
        num_hidden_layers=24,
        num_attention_heads=32,
        max_position_embeddings=2048,
        word_embed_proj_dim=2048,
    )
    B, T, NEW, SB, ST = 16, 512, 64, 8, 2048
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


class WeightOnlyInt8Linear(nn.Module):
    def __init__(self, linear):
        super().__init__()
        w = linear.weight.detach().float()
        scale = w.abs().amax(dim=1).clamp(min=1e-5) / 127.0
        q = (w / scale[:, None]).round().clamp(-128, 127).to(torch.int8)
        self.register_buffer("weight", q)
        self.register_buffer("scales", scale.to(linear.weight.dtype))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x):
        y = F.linear(x, self.weight.to(dtype=x.dtype)) * self.scales
        return y if self.bias is None else y + self.bias


model = OPTForCausalLM(cfg).to(device=device, dtype=dtype).eval()
model.generation_config.eos_token_id = None
model.generation_config.pad_token_id = cfg.pad_token_id


def report(name):
    if device == "cuda":
        print(
            f"{name} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name}")


report("fp16 model")
with torch.no_grad():
    for layer in model.model.decoder.layers:
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
            setattr(attn, name, WeightOnlyInt8Linear(getattr(attn, name)))
        layer.fc1 = WeightOnlyInt8Linear(layer.fc1)
        layer.fc2 = WeightOnlyInt8Linear(layer.fc2)
report("quantized")

ids = torch.randint(2, cfg.vocab_size, (B, T), device=device)
with torch.no_grad():
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False
    )
report(f"generate no_grad {tuple(out.shape)}")
del out
with torch.inference_mode():
    out = model.generate(
        input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, do_sample=False
    )
report(f"generate inference_mode {tuple(out.shape)}")
del out, ids
with torch.inference_mode():
    seqs = torch.randint(2, cfg.vocab_size, (SB, ST), device=device)
    loss = model(input_ids=seqs, labels=seqs).loss
    print(f"score loss {loss.item():.3f}")
report("scoring")
