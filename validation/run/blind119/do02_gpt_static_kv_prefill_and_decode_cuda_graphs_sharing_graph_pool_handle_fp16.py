"""A GPT decoder (16 layers, width 1024, 16 heads, GPT-2 vocabulary) served in fp16 with a static KV
cache (batch 32, 1,024 positions) and two CUDA graphs that share one memory pool: the prefill of a
512-token prompt and the one-token decode step (the write position a GPU tensor, the cache written with
index_copy_, attention masked past it) are each warmed up on a side stream and captured with
torch.cuda.graph(..., pool=torch.cuda.graph_pool_handle()); the prefill graph is replayed once and the
decode graph 96 times per request, for two requests; then the graphs are dropped and the cache emptied;
5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11902)
LAYERS, D, H, V = (2, 128, 4, 1000) if SMALL else (16, 1024, 16, 50257)
B, T, PROMPT, NEW = (2, 64, 16, 8) if SMALL else (32, 1024, 512, 96)
HD = D // H
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x, k_cache, v_cache, pos=None):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(b, n, H, HD).transpose(1, 2) for t in (q, k, v))
        if pos is None:
            k_cache[:, :, :n].copy_(k)
            v_cache[:, :, :n].copy_(v)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            k_cache.index_copy_(2, pos, k)
            v_cache.index_copy_(2, pos, v)
            mask = (torch.arange(T, device=x.device) <= pos).view(1, 1, 1, T)
            y = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 if p.shape[0] == D else 1))

    def forward(self, ids, positions, caches, pos=None):
        x = self.wte(ids) + self.wpe(positions)
        for blk, (kc, vc) in zip(self.blocks, caches, strict=True):
            x = blk(x, kc, vc, pos)
        return self.head(self.ln_f(x[:, -1:]))


model = GPT().to(device=device, dtype=dtype).eval()
caches = [
    (
        torch.zeros(B, H, T, HD, device=device, dtype=dtype),
        torch.zeros(B, H, T, HD, device=device, dtype=dtype),
    )
    for _ in range(LAYERS)
]
static_prompt = torch.randint(0, V, (B, PROMPT), device=device)
prompt_pos = torch.arange(PROMPT, device=device)
static_tok = torch.zeros(B, 1, dtype=torch.long, device=device)
static_pos = torch.tensor([PROMPT], device=device)
if device == "cuda":
    print(f"model and cache {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def prefill():
    return model(static_prompt, prompt_pos, caches)


def decode():
    return model(static_tok, static_pos, caches, pos=static_pos)


with torch.inference_mode():
    if device == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                prefill()
                decode()
        torch.cuda.current_stream().wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        g_prefill, g_decode = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with torch.cuda.graph(g_prefill, pool=pool):
            prefill_logits = prefill()
        with torch.cuda.graph(g_decode, pool=pool):
            decode_logits = decode()
        print(
            f"captured peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    for request in range(2):
        static_prompt.copy_(torch.randint(0, V, (B, PROMPT), device=device))
        if device == "cuda":
            g_prefill.replay()
        else:
            prefill_logits = prefill()
        static_tok.copy_(prefill_logits.argmax(-1))
        outs = [static_tok.clone()]
        for i in range(NEW - 1):
            static_pos.fill_(PROMPT + i)
            if device == "cuda":
                g_decode.replay()
            else:
                decode_logits = decode()
            static_tok.copy_(decode_logits.argmax(-1))
            outs.append(static_tok.clone())
        tokens = torch.cat(outs, dim=1)
        if device == "cuda":
            print(
                f"request {request} tokens {tuple(tokens.shape)} peak {torch.cuda.max_memory_allocated()}"
                f" reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
if device == "cuda":
    del g_prefill, g_decode, prefill_logits, decode_logits
    torch.cuda.empty_cache()
    print(f"graphs dropped allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
