"""Int8 weight-only quantized inference of a small Llama the way pytorch-labs/gpt-fast writes it
(model.py and quantize.py's WeightOnlyInt8QuantHandler, without torch.compile): the decoder is built
in bf16 (RMSNorm, rotary embeddings, grouped-query attention with 16 query and 4 KV heads,
`repeat_interleave` of K and V, SwiGLU, a static KV cache written by `k_out[:, :, input_pos] =`
and a boolean causal mask sliced by input_pos for SDPA), then every nn.Linear is replaced in place
by a WeightOnlyInt8Linear: weights quantized per output channel on the GPU by
`dynamically_quantize_per_channel` (aminmax, symmetric scales, round, clamp to int8), bf16 scales,
and the forward dequantizes on the fly (`F.linear(x, weight.to(x.dtype)) * scales`). 16 layers of
width 2048 (FFN 5632), vocab 32,000. Phases: build the bf16 model; quantize; prefill of 4 prompts of
1,024 tokens; 48 greedy decode steps; a second request (KV caches set up again) of 8 prompts of 512
tokens, its prefill; its 32 decode steps sampled with temperature 0.8 and top-k 200 by gpt-fast's
`multinomial_sample_one_no_sync` (exponential_ noise, argmax); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16603)
if SMALL:
    D, LAYERS, HQ, HKV, FFN, VOCAB = 128, 2, 4, 2, 352, 512
    B1, P1, N1, B2, P2, N2 = 2, 32, 4, 2, 16, 3
else:
    D, LAYERS, HQ, HKV, FFN, VOCAB = 2048, 16, 16, 4, 5632, 32000
    B1, P1, N1, B2, P2, N2 = 4, 1024, 48, 8, 512, 32
HD = D // HQ
device = "cuda" if torch.cuda.is_available() else "cpu"
bf16 = torch.bfloat16


class KVCache(nn.Module):
    def __init__(self, max_batch_size, max_seq_length, dtype=bf16):
        super().__init__()
        shape = (max_batch_size, HKV, max_seq_length, HD)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype))
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype))

    def update(self, input_pos, k_val, v_val):
        k_out, v_out = self.k_cache, self.v_cache
        k_out[:, :, input_pos] = k_val
        v_out[:, :, input_pos] = v_val
        return k_out, v_out


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        out = x.float() * torch.rsqrt(torch.mean(x.float() * x.float(), dim=-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


def precompute_freqs_cis(seq_len, n_elem, base=10000):
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2)[: (n_elem // 2)].float() / n_elem))
    t = torch.arange(seq_len, device=freqs.device)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    return torch.stack([freqs_cis.real, freqs_cis.imag], dim=-1).to(dtype=bf16)


def apply_rotary_emb(x, freqs_cis):
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    freqs_cis = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
            xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1],
        ],
        -1,
    )
    return x_out2.flatten(3).type_as(x)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.wqkv = nn.Linear(D, (HQ + 2 * HKV) * HD, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        self.kv_cache = None

    def forward(self, x, freqs_cis, mask, input_pos):
        bsz, seqlen, _ = x.shape
        q, k, v = self.wqkv(x).split([D, HKV * HD, HKV * HD], dim=-1)
        q = apply_rotary_emb(q.view(bsz, seqlen, HQ, HD), freqs_cis)
        k = apply_rotary_emb(k.view(bsz, seqlen, HKV, HD), freqs_cis)
        v = v.view(bsz, seqlen, HKV, HD)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = self.kv_cache.update(input_pos, k, v)
        k = k.repeat_interleave(HQ // HKV, dim=1)
        v = v.repeat_interleave(HQ // HKV, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        return self.wo(y.transpose(1, 2).contiguous().view(bsz, seqlen, D))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(D, FFN, bias=False)
        self.w3 = nn.Linear(D, FFN, bias=False)
        self.w2 = nn.Linear(FFN, D, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention, self.feed_forward = Attention(), FeedForward()
        self.ffn_norm, self.attention_norm = RMSNorm(D), RMSNorm(D)

    def forward(self, x, input_pos, freqs_cis, mask):
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(TransformerBlock() for _ in range(LAYERS))
        self.norm = RMSNorm(D)
        self.output = nn.Linear(D, VOCAB, bias=False)
        self.max_batch_size = self.max_seq_length = -1

    def setup_caches(self, max_batch_size, max_seq_length):
        self.max_seq_length, self.max_batch_size = max_seq_length, max_batch_size
        dtype = self.output.weight.dtype
        if hasattr(self.output, "scales"):
            dtype = self.output.scales.dtype
        for b in self.layers:
            b.attention.kv_cache = KVCache(max_batch_size, max_seq_length, dtype).to(device)
        self.freqs_cis = precompute_freqs_cis(max_seq_length, HD).to(device)
        self.causal_mask = torch.tril(
            torch.ones(max_seq_length, max_seq_length, dtype=torch.bool, device=device)
        )

    def forward(self, idx, input_pos):
        mask = self.causal_mask[None, None, input_pos]
        freqs_cis = self.freqs_cis[input_pos]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, input_pos, freqs_cis, mask)
        return self.output(self.norm(x))


def dynamically_quantize_per_channel(x, quant_min, quant_max, target_dtype):
    eps = torch.finfo(torch.float32).eps
    min_val, max_val = torch.aminmax(x, dim=1)
    min_val_neg = torch.min(min_val, torch.zeros_like(min_val))
    max_val_pos = torch.max(max_val, torch.zeros_like(max_val))
    max_val_pos = torch.max(-min_val_neg, max_val_pos)
    scales = max_val_pos / (float(quant_max - quant_min) / 2)
    scales = torch.clamp(scales, min=eps).to(x.dtype)
    zero_points = torch.zeros(min_val_neg.size(), dtype=torch.int64, device=x.device)
    x_div = x / scales.unsqueeze(-1)
    x_round = torch.round(x_div)
    x_zp = x_round + zero_points.unsqueeze(-1)
    quant = torch.clamp(x_zp, quant_min, quant_max).to(target_dtype)
    return quant, scales, zero_points


class WeightOnlyInt8Linear(nn.Module):
    def __init__(self, in_features, out_features, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer(
            "weight", torch.empty((out_features, in_features), dtype=torch.int8, device=device)
        )
        self.register_buffer("scales", torch.ones(out_features, dtype=bf16, device=device))

    def forward(self, input):
        return F.linear(input, self.weight.to(dtype=input.dtype)) * self.scales


@torch.no_grad()
def quantize_int8_weight_only_(module):
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            q, scales, _ = dynamically_quantize_per_channel(child.weight.float(), -128, 127, torch.int8)
            new = WeightOnlyInt8Linear(child.in_features, child.out_features, device=q.device)
            new.weight.copy_(q)
            new.scales.copy_(scales.to(bf16))
            setattr(module, name, new)
            del q, scales
        else:
            quantize_int8_weight_only_(child)


def multinomial_sample_one_no_sync(probs_sort):
    q = torch.empty_like(probs_sort).exponential_(1)
    return torch.argmax(probs_sort / q, dim=-1, keepdim=True).to(dtype=torch.int)


def logits_to_probs(logits, temperature=1.0, top_k=None):
    logits = logits / max(temperature, 1e-5)
    if top_k is not None:
        v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        pivot = v.select(-1, -1).unsqueeze(-1)
        logits = torch.where(logits < pivot, -float("Inf"), logits)
    return torch.nn.functional.softmax(logits, dim=-1)


def sample(logits, temperature, top_k):
    if temperature == 0:
        return logits[:, -1].argmax(-1, keepdim=True).to(torch.int)
    probs = logits_to_probs(logits[:, -1], temperature, top_k)
    return multinomial_sample_one_no_sync(probs)


def generate(model, prompt, max_new_tokens, temperature=0.0, top_k=None):
    b, t = prompt.shape
    model.setup_caches(max_batch_size=b, max_seq_length=t + max_new_tokens)
    input_pos = torch.arange(0, t, device=device)
    logits = model(prompt, input_pos)
    next_token = sample(logits, temperature, top_k)
    if device == "cuda":
        print(
            f"prefill {b}x{t} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    new_tokens = [next_token]
    input_pos = torch.tensor([t], device=device, dtype=torch.int)
    for _ in range(max_new_tokens - 1):
        logits = model(next_token, input_pos)
        next_token = sample(logits, temperature, top_k)
        input_pos += 1
        new_tokens.append(next_token.clone())
    return torch.cat([prompt, *new_tokens], dim=-1)


with torch.device(device):
    model = Transformer()
model = model.to(dtype=bf16).eval()
if device == "cuda":
    print(f"bf16 model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
quantize_int8_weight_only_(model)
if device == "cuda":
    print(f"int8 model {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
gen = torch.Generator(device=device).manual_seed(16603)
with torch.no_grad():
    prompt = torch.randint(0, VOCAB, (B1, P1), device=device, generator=gen)
    out = generate(model, prompt, N1)
    if device == "cuda":
        print(
            f"greedy {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    prompt = torch.randint(0, VOCAB, (B2, P2), device=device, generator=gen)
    out = generate(model, prompt, N2, temperature=0.8, top_k=200)
if device == "cuda":
    print(
        f"sampled {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
