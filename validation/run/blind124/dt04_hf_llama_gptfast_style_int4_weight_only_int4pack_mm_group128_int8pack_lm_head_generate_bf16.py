"""Weight-only quantization of an HF Llama (built from `LlamaConfig`, 12 layers of width 4096,
bf16) by hand the way gpt-fast does it: every decoder Linear's weight is quantized per group of
128 to 4 bits with bf16 scales and zeros, packed two to a byte and converted by
`torch._convert_weight_to_int4pack` (8 inner k-tiles) for `torch._weight_int4pack_mm`, one layer
at a time as it is freed; the lm_head is quantized per row to int8 for `torch._weight_int8pack_mm`;
then `generate` (greedy, DynamicCache) for 4 prompts of 512 tokens and 48 new tokens, and for 16
prompts of 256 and 32 new; 5 phases."""

import os

import torch
import torch.nn as nn
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12404)
device = "cuda" if torch.cuda.is_available() else "cpu"
GROUP, TILES = (32, 2) if SMALL else (128, 8)
if SMALL:
    cfg = LlamaConfig(
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1024,
    )
else:
    cfg = LlamaConfig(
        hidden_size=4096,
        intermediate_size=11008,
        num_hidden_layers=12,
        num_attention_heads=32,
        num_key_value_heads=32,
        vocab_size=32000,
        max_position_embeddings=4096,
    )
with torch.device(device):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
if device == "cuda":
    print(f"bf16 model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Int4WeightOnlyLinear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach()
        n, k = w.shape
        g = w.float().reshape(-1, GROUP)
        lo, hi = g.amin(1, keepdim=True), g.amax(1, keepdim=True)
        scales = ((hi - lo).clamp(min=1e-6) / 15).reshape(n, k // GROUP)
        zeros = lo.reshape(n, k // GROUP) + scales * 8
        q = ((g - lo) / scales.reshape(-1, 1)).round().clamp(0, 15).to(torch.int32).reshape(n, k)
        packed = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        self.register_buffer("weight", torch._convert_weight_to_int4pack(packed, TILES))
        sz = torch.stack([scales, zeros], -1).transpose(0, 1).contiguous().to(torch.bfloat16)
        self.register_buffer("scales_and_zeros", sz)
        self.out_features = n

    def forward(self, x):
        shape = x.shape
        y = torch._weight_int4pack_mm(x.reshape(-1, shape[-1]), self.weight, GROUP, self.scales_and_zeros)
        return y.reshape(*shape[:-1], self.out_features)


class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        s = w.abs().amax(1).clamp(min=1e-8) / 127
        self.register_buffer("weight", (w / s[:, None]).round().clamp(-128, 127).to(torch.int8))
        self.register_buffer("scales", s.to(torch.bfloat16))

    def forward(self, x):
        shape = x.shape
        return torch._weight_int8pack_mm(x.reshape(-1, shape[-1]), self.weight, self.scales).reshape(
            *shape[:-1], -1
        )


for layer in model.model.layers:
    for parent in (layer.self_attn, layer.mlp):
        for name, mod in list(parent.named_children()):
            if isinstance(mod, nn.Linear):
                setattr(parent, name, Int4WeightOnlyLinear(mod))
                del mod
model.lm_head = Int8WeightOnlyLinear(model.lm_head)
if device == "cuda":
    print(
        f"quantized {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()

for b, t, new in ((2, 32, 4), (4, 16, 4)) if SMALL else ((4, 512, 48), (16, 256, 32)):
    ids = torch.randint(0, cfg.vocab_size, (b, t), device=device)
    with torch.inference_mode():
        out = model(input_ids=ids, logits_to_keep=1)
        if device == "cuda":
            print(
                f"prefill {b}x{t}"
                f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
        del out
        gen = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    if device == "cuda":
        print(
            f"generate {tuple(gen.shape)}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
