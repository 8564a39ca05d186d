"""A hand-written serving loop as gpt-fast writes it: a 12-layer GPT (d 1024, 16 heads of 64, vocab 32000,
bf16 weights) with a static KV cache preallocated for 8 sequences of 1,024 positions (buffers of the
model), the prompt of 256 tokens prefilled eagerly, then one-token decode steps through
`torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)`: the cache written in place with
`index_copy_` at the current position (a 1-element position tensor), SDPA over the whole cache with a
boolean mask. 24 decode steps (warm-up, recording, replays of Inductor's CUDA graph trees), the next token by
argmax; then a second batch of prompts (the cache zeroed, the same shapes: replays only).

No value-dependent sizes (argmax tokens never change a shape). 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2511)
V, D, H, HD, L, B, S, P = 32000, 1024, 16, 64, 12, 8, 1024, 256


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc, self.proj = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)
        self.register_buffer("k_cache", torch.zeros(B, H, S, HD), persistent=False)
        self.register_buffer("v_cache", torch.zeros(B, H, S, HD), persistent=False)

    def forward(self, x, pos, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, HD).permute(2, 0, 3, 1, 4)
        self.k_cache.index_copy_(2, pos, k)
        self.v_cache.index_copy_(2, pos, v)
        a = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.proj(F.gelu(self.fc(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.nf = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, pos, mask):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, pos, mask)
        return self.head(self.nf(x))


model = GPT().cuda().to(torch.bfloat16).eval()
causal = torch.tril(torch.ones(S, S, dtype=torch.bool, device="cuda"))
report("setup")


def decode_one(tok, pos):
    logits = model(tok, pos, causal[pos].view(1, 1, 1, S))
    return logits[:, -1].argmax(-1, keepdim=True)


decode = torch.compile(decode_one, mode="reduce-overhead", fullgraph=True)


def serve(steps):
    prompt = torch.randint(0, V, (B, P), device="cuda")
    with torch.no_grad():
        for blk in model.blocks:
            blk.k_cache.zero_()
            blk.v_cache.zero_()
        pos = torch.arange(P, device="cuda")
        logits = model(prompt, pos, causal[:P].view(1, 1, P, S))
        tok = logits[:, -1].argmax(-1, keepdim=True)
        del logits
        out = [tok]
        for i in range(steps):
            tok = decode(tok, torch.tensor([P + i], device="cuda")).clone()
            out.append(tok)
    return torch.cat(out, 1)


first = serve(12)
report("prefill_and_first_12_decode_steps")
more = serve(24)
report("second_batch_24_decode_steps_replays")
del first, more
report("outputs_dropped")
