"""Sentence embeddings from a BERT-large encoder built from `BertConfig` (24 layers of 1,024, 16 heads,
FFN 4,096, SDPA attention) served in fp16, then quantized by hand to W8A8 the way int8 serving code does
it in pure PyTorch: every `nn.Linear` of the encoder is swapped for a module holding an int8 weight
(symmetric, one fp32 scale per output channel) and an fp16 bias, and its forward quantizes the
activation per token on the fly (absmax / 127, round, clamp, int8), multiplies with `torch._int_mm`
(int8 x int8 -> int32, the weight passed transposed, column-major) and rescales in fp32 before casting
back to fp16. The fp16 weights are dropped as each layer is swapped and the cache emptied.

Phases: 0 the fp16 model; 1 fp16 embeddings of 64 x 256 tokens under `inference_mode` (masked mean
pooling, L2-normalized); 2 the W8A8 swap (fp16 linears freed, `empty_cache`); 3 W8A8 embeddings of
64 x 256; 4 W8A8 embeddings of 256 padded sequences of 24 to 128 tokens (fixed lengths, attention
mask). Seeded, nothing downloaded."""

import gc
import os

import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(354_02)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256)
    B, T = 4, 32
else:
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    B, T = 64, 256
cfg._attn_implementation = "sdpa"


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


class W8A8Linear(nn.Module):
    def __init__(self, lin):
        super().__init__()
        w = lin.weight.detach().float()
        scale = w.abs().amax(1, keepdim=True).clamp(min=1e-8) / 127
        self.register_buffer("weight", (w / scale).round().clamp(-127, 127).to(torch.int8))  # (N, K)
        self.register_buffer("w_scale", scale.reshape(1, -1))
        self.register_buffer("bias", lin.bias.detach().clone())
        self.out_features = w.shape[0]

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        x_scale = x2.abs().amax(1, keepdim=True).float().clamp(min=1e-8) / 127
        xq = (x2 / x_scale).round().clamp(-127, 127).to(torch.int8)
        acc = torch._int_mm(xq, self.weight.t())
        y = (acc.float() * x_scale * self.w_scale).to(x.dtype) + self.bias
        return y.reshape(*shape[:-1], self.out_features)


model = BertModel(cfg, add_pooling_layer=False).to(device=device, dtype=torch.float16).eval()
model.requires_grad_(False)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
report("fp16 BERT-large encoder")


@torch.inference_mode()
def embed(ids, mask):
    h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(h.dtype)
    emb = (h * m).sum(1) / m.sum(1).clamp(min=1)
    return F.normalize(emb.float(), dim=-1)


def dense_batch(b, t):
    ids = torch.randint(1000, cfg.vocab_size, (b, t), device=device)
    return ids, torch.ones(b, t, dtype=torch.long, device=device)


ids, mask = dense_batch(B, T)
ref = embed(ids, mask)
report("fp16 embeddings of 64 x 256")

with torch.no_grad():
    for layer in model.encoder.layer:
        for parent, names in (
            (layer.attention.self, ("query", "key", "value")),
            (layer.attention.output, ("dense",)),
            (layer.intermediate, ("dense",)),
            (layer.output, ("dense",)),
        ):
            for name in names:
                setattr(parent, name, W8A8Linear(getattr(parent, name)))
gc.collect()
if cuda:
    torch.cuda.empty_cache()
print(
    f"{sum(b.numel() * b.element_size() for b in model.buffers()) / 2**20:.0f} MiB of buffers after the swap"
)
report("W8A8 swap, fp16 linears freed")

q = embed(ids, mask)
print(f"cosine to fp16 {(q * ref).sum(-1).mean().item():.4f}")
report("W8A8 embeddings of 64 x 256")

N = 4 * B
lengths = [24 + (i * 37) % 105 for i in range(N)]
tmax = max(lengths)
ids = torch.randint(1000, cfg.vocab_size, (N, tmax), device=device)
mask = (torch.arange(tmax, device=device)[None] < torch.tensor(lengths, device=device)[:, None]).long()
ids = ids * mask
out = embed(ids, mask)
print(f"{N} padded sequences up to {tmax} tokens, mean norm {out.norm(dim=-1).mean().item():.3f}")
report("W8A8 embeddings of 256 padded sequences")
