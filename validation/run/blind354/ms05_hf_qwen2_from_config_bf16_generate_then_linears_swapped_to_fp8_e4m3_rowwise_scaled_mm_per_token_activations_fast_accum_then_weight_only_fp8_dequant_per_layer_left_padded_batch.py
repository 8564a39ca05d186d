"""A Qwen2 decoder built from `Qwen2Config` (16 layers of 1,536, 12 query and 2 key/value heads, q/k/v
biases, SwiGLU MLP 8,960, vocabulary 151,936, tied embeddings; SDPA attention) generating greedily in
bf16 from a left-padded batch, then served in fp8 by hand in pure PyTorch: every `nn.Linear` of the
layers is swapped for a module holding a float8_e4m3fn weight with one fp32 scale per output channel
(the bf16 weights freed, `empty_cache`). Its forward either quantizes the activation per token on the
fly (absmax / 448) and multiplies with `torch._scaled_mm` using rowwise scales ((M, 1) and (1, N) fp32),
`use_fast_accum=True`, bf16 output, the bias added after; or, weight-only, dequantizes the fp8 weight
to bf16 (cast and scale) for every call and runs `F.linear`.

Phases: 0 the bf16 model; 1 `generate` on 16 left-padded prompts of 200 to 512 tokens, exactly 64 new
tokens (min = max), greedy; 2 the fp8 swap; 3 the same generation with W8A8 rowwise `_scaled_mm`; 4 the
same generation with weight-only fp8 storage dequantized per layer. Seeded, nothing downloaded."""

import gc
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(354_05)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    cfg = Qwen2Config(
        vocab_size=1024,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    )
    B, TMIN, TMAX, NEW = 2, 16, 32, 8
else:
    cfg = Qwen2Config(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=16,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    B, TMIN, TMAX, NEW = 16, 200, 512, 64
cfg._attn_implementation = "sdpa"
cfg.pad_token_id = 0
E4M3 = torch.finfo(torch.float8_e4m3fn).max
MODE = "w8a8"


def report(tag):
    if cuda:
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


class Fp8Linear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach()
        scale = w.abs().amax(1, keepdim=True).float().clamp(min=1e-12) / E4M3  # (N, 1)
        self.register_buffer("weight", (w.float() / scale).clamp(-E4M3, E4M3).to(torch.float8_e4m3fn))
        self.register_buffer("w_scale", scale.t().contiguous())  # (1, N)
        self.register_buffer("bias", None if lin.bias is None else lin.bias.detach().clone())
        self.out_features = w.shape[0]

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if MODE == "w8a8":
            sx = x2.abs().amax(1, keepdim=True).float().clamp(min=1e-12) / E4M3  # (M, 1)
            x8 = (x2.float() / sx).clamp(-E4M3, E4M3).to(torch.float8_e4m3fn)
            y = torch._scaled_mm(
                x8,
                self.weight.t(),
                scale_a=sx,
                scale_b=self.w_scale,
                out_dtype=torch.bfloat16,
                use_fast_accum=True,
            )
            if self.bias is not None:
                y = y + self.bias
        else:  # weight-only: dequantize this layer's weight for the call
            w = self.weight.to(torch.bfloat16) * self.w_scale.t().to(torch.bfloat16)
            y = F.linear(x2, w, self.bias)
        return y.reshape(*shape[:-1], self.out_features)


model = Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16).eval()
model.requires_grad_(False)
print(f"{sum(p.numel() for p in model.parameters()) / 1e9:.2f}B parameters, bf16")
report("bf16 Qwen2 model")

lengths = [TMIN + (i * 59) % (TMAX - TMIN + 1) for i in range(B)]
lengths[0] = TMAX
T = max(lengths)
ids = torch.randint(1, cfg.vocab_size, (B, T), device=device)
mask = (torch.arange(T, device=device)[None] >= (T - torch.tensor(lengths, device=device))[:, None]).long()
ids = ids * mask


@torch.inference_mode()
def generate():
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        pad_token_id=0,
    )
    return out[:, T:]


ref = generate()
print(f"bf16 generated {tuple(ref.shape)}")
report("bf16 generate, 16 left-padded prompts, 64 new tokens")

with torch.no_grad():
    for layer in model.model.layers:
        for parent, names in (
            (layer.self_attn, ("q_proj", "k_proj", "v_proj", "o_proj")),
            (layer.mlp, ("gate_proj", "up_proj", "down_proj")),
        ):
            for name in names:
                setattr(parent, name, Fp8Linear(getattr(parent, name)))
gc.collect()
if cuda:
    torch.cuda.empty_cache()
report("fp8 e4m3 swap of every layer linear, bf16 weights freed")

out = generate()
print(f"w8a8 rowwise: {(out == ref).float().mean().item():.3f} of tokens as bf16")
report("W8A8 rowwise _scaled_mm generate")

MODE = "weight_only"
out = generate()
print(f"weight-only fp8: {(out == ref).float().mean().item():.3f} of tokens as bf16")
report("weight-only fp8 dequant per layer generate")
