"""Batched generation from a hand-written Llama-style decoder (12 layers, width 2,048, 16 query heads
and 4 KV heads of 128, SwiGLU of 5,632, RMSNorm, rotary embeddings, vocab 32,000; weights in fp16
by model.half()) with the KV cache grown by torch.cat at every step, as minimal inference scripts
do: ragged prompts whose lengths a seeded CPU generator draws are left-padded to the batch's
longest, the boolean padding mask grows by torch.cat too, keys and values are widened to the query
heads by repeat_interleave and attention is F.scaled_dot_product_attention with the mask; three
rounds (8 prompts of 200 to 900 tokens and 128 new tokens greedy, 24 prompts of 16 to 300 and 96
new tokens by top-p 0.9 sampling with a seeded CUDA generator, 2 prompts of 1,500 to 2,000 and 160
new tokens greedy), the cache dropped between rounds; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14303)
V, D, L, H, KV, FF = (1000, 64, 2, 4, 2, 128) if SMALL else (32000, 2048, 12, 16, 4, 5632)
HD = D // H
ROUNDS = (
    [(2, 5, 12, 6, "greedy"), (3, 4, 10, 5, "top_p"), (1, 20, 24, 8, "greedy")]
    if SMALL
    else [(8, 200, 900, 128, "greedy"), (24, 16, 300, 96, "top_p"), (2, 1500, 2000, 160, "greedy")]
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).type_as(x)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm = RMSNorm(D)
        self.wq = nn.Linear(D, H * HD, bias=False)
        self.wk = nn.Linear(D, KV * HD, bias=False)
        self.wv = nn.Linear(D, KV * HD, bias=False)
        self.wo = nn.Linear(H * HD, D, bias=False)
        self.ffn_norm = RMSNorm(D)
        self.w1 = nn.Linear(D, FF, bias=False)
        self.w3 = nn.Linear(D, FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin, mask, cache):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(b, t, H, HD).transpose(1, 2)
        k = self.wk(h).view(b, t, KV, HD).transpose(1, 2)
        v = self.wv(h).view(b, t, KV, HD).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        new_cache = (k, v)
        kk = k.repeat_interleave(H // KV, dim=1)
        vv = v.repeat_interleave(H // KV, dim=1)
        o = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
        x = x + self.wo(o.transpose(1, 2).reshape(b, t, D))
        h = self.ffn_norm(x)
        x = x + self.w2(F.silu(self.w1(h)) * self.w3(h))
        return x, new_cache


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.layers = nn.ModuleList([Layer() for _ in range(L)])
        self.norm = RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, ids, pos, mask, caches):
        freqs = pos[:, None, :, None].float() * self.inv_freq
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos().to(torch.float16), emb.sin().to(torch.float16)
        x = self.embed(ids)
        new = []
        for i, layer in enumerate(self.layers):
            x, c = layer(x, cos, sin, mask, caches[i] if caches else None)
            new.append(c)
        return self.head(self.norm(x[:, -1:])), new


model = Decoder().to(device).half().eval()
cpu_gen = torch.Generator().manual_seed(99)
cuda_gen = torch.Generator(device=device).manual_seed(5)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    for batch, lo, hi, new_tokens, mode in ROUNDS:
        lengths = torch.randint(lo, hi + 1, (batch,), generator=cpu_gen)
        longest = int(lengths.max())
        ids = torch.zeros(batch, longest, dtype=torch.long)
        keep = torch.zeros(batch, longest, dtype=torch.bool)
        for i, n in enumerate(lengths.tolist()):
            ids[i, longest - n:] = torch.randint(1, V, (n,), generator=cpu_gen)
            keep[i, longest - n:] = True
        ids, keep = ids.to(device), keep.to(device)
        pos = (keep.long().cumsum(-1) - 1).clamp(min=0)
        causal = torch.ones(longest, longest, dtype=torch.bool, device=device).tril()
        mask = causal[None, None] & keep[:, None, None, :]
        mask = mask | ~keep[:, None, :, None]
        logits, caches = model(ids, pos, mask, None)
        out = []
        nxt_pos = pos[:, -1:] + 1
        for _ in range(new_tokens):
            if mode == "greedy":
                nxt = logits[:, -1].argmax(-1, keepdim=True)
            else:
                probs = torch.softmax(logits[:, -1].float(), dim=-1)
                sp, si = probs.sort(dim=-1, descending=True)
                cum = sp.cumsum(-1)
                sp = sp.masked_fill((cum - sp) > 0.9, 0.0)
                pick = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=cuda_gen)
                nxt = si.gather(-1, pick)
            out.append(nxt)
            keep = torch.cat([keep, torch.ones(batch, 1, dtype=torch.bool, device=device)], dim=1)
            logits, caches = model(nxt, nxt_pos, keep[:, None, None, :], caches)
            nxt_pos = nxt_pos + 1
        text = torch.cat(out, dim=1)
        total = int(caches[0][0].shape[2])
        del caches, logits, mask, causal, ids, out
        if device == "cuda":
            print(
                f"{mode} batch {batch} prompts {lo}-{hi} (longest {longest}) -> {total} positions,"
                f" first {text[0, :4].tolist()} peak {torch.cuda.max_memory_allocated()}"
                f" reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
print(f"done {text.shape[1]}")
