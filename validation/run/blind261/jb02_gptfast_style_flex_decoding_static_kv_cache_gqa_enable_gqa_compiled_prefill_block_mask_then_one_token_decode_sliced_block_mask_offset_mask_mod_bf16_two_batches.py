"""gpt-fast's FlexAttention decoding recipe: a Llama-style decoder (8 layers, d 2048, 32 query heads over 8
key/value heads of 64, SwiGLU 5632, RMSNorm, RoPE, vocab 32000, bf16 weights from init) with a static
KV cache (batch, 8, 2048, 64) per layer written by `index_copy_`, and attention through
`flex_attention(..., enable_gqa=True)` on the whole cache. Prefill: a compiled forward of the prompt
(1024 tokens) with `create_block_mask(causal, 1, 1, prompt, max_seq)`. Decoding: a compiled
one-token step (fullgraph) whose BlockMask is the max_seq x max_seq causal mask's row of blocks for the
current position (`block_mask[:, :, input_pos // 128]`, its `mask_mod` shifted by the position tensor,
`seq_lengths = (1, max_seq)`): a query of length 1, so Inductor lowers it with the flex decoding
template (split over the KV length, partial results in fp32). Greedy argmax, 48 new tokens at batch 4;
then a second request batch of 8 with a 512-token prompt (a new prefill shape, the caches made again).

Token values never decide a size. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.manual_seed(2612)
V, D, H, KVH, HD, L, FF, MAX_SEQ = 32000, 2048, 32, 8, 64, 8, 5632, 2048


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def causal(b, h, q, kv):
    return q >= kv


def shifted(mask_mod, offset):
    def _mask_mod(b, h, q, kv):
        return mask_mod(b, h, q + offset, kv)

    return _mask_mod


class KVCache(nn.Module):
    def __init__(self, batch):
        super().__init__()
        shape = (batch, KVH, MAX_SEQ, HD)
        self.register_buffer("k", torch.zeros(shape, dtype=torch.bfloat16, device="cuda"), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=torch.bfloat16, device="cuda"), persistent=False)

    def update(self, input_pos, k, v):
        self.k.index_copy_(2, input_pos, k)
        self.v.index_copy_(2, input_pos, v)
        return self.k, self.v


def rope(x, cos, sin):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2 :]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).type_as(x)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.wqkv = nn.Linear(D, (H + 2 * KVH) * HD, bias=False)
        self.wo = nn.Linear(H * HD, D, bias=False)
        self.w13 = nn.Linear(D, 2 * FF, bias=False)
        self.w2 = nn.Linear(FF, D, bias=False)
        self.cache = None

    def forward(self, x, cos, sin, block_mask, input_pos):
        b, t, _ = x.shape
        q, k, v = self.wqkv(self.n1(x)).split([H * HD, KVH * HD, KVH * HD], dim=-1)
        q = rope(q.view(b, t, H, HD), cos, sin).transpose(1, 2)
        k = rope(k.view(b, t, KVH, HD), cos, sin).transpose(1, 2)
        v = v.view(b, t, KVH, HD).transpose(1, 2)
        k, v = self.cache.update(input_pos, k, v)
        y = flex_attention(q, k, v, block_mask=block_mask, enable_gqa=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, H * HD))
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u)


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.out = nn.Linear(D, V, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        ang = torch.outer(torch.arange(MAX_SEQ).float(), inv)
        self.register_buffer("cos", ang.cos().to(torch.bfloat16), persistent=False)
        self.register_buffer("sin", ang.sin().to(torch.bfloat16), persistent=False)

    def setup_caches(self, batch):
        for layer in self.layers:
            layer.cache = KVCache(batch)

    def forward(self, idx, input_pos, block_mask):
        cos = self.cos[input_pos][None, :, None, :]
        sin = self.sin[input_pos][None, :, None, :]
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x, cos, sin, block_mask, input_pos)
        return self.out(self.norm(x))


with torch.device("cuda"):
    model = Llama().to(torch.bfloat16)
model.eval()
full_mask = create_block_mask(causal, 1, 1, MAX_SEQ, MAX_SEQ, device="cuda")
report("model_bf16_and_full_causal_block_mask")


def prefill(model, idx, input_pos):
    mask = create_block_mask(causal, 1, 1, input_pos.shape[0], MAX_SEQ, device="cuda")
    logits = model(idx, input_pos, mask)
    return logits[:, -1].argmax(dim=-1, keepdim=True)


def decode_one_token(model, cur, input_pos):
    block_index = input_pos // full_mask.BLOCK_SIZE[0]
    mask = full_mask[:, :, block_index]
    mask.mask_mod = shifted(full_mask.mask_mod, input_pos[0])
    mask.seq_lengths = (1, MAX_SEQ)
    logits = model(cur, input_pos, mask)
    return logits[:, -1].argmax(dim=-1, keepdim=True)


prefill_c = torch.compile(prefill, fullgraph=True)
decode_c = torch.compile(decode_one_token, fullgraph=True)


def generate(batch, prompt_len, new_tokens, tag):
    model.setup_caches(batch)
    prompt = torch.randint(0, V, (batch, prompt_len), device="cuda")
    with torch.no_grad():
        cur = prefill_c(model, prompt, torch.arange(prompt_len, device="cuda"))
        report(f"{tag}_prefill_{prompt_len}")
        out = [cur]
        input_pos = torch.tensor([prompt_len], device="cuda", dtype=torch.long)
        for _ in range(new_tokens - 1):
            cur = decode_c(model, cur, input_pos)
            input_pos += 1
            out.append(cur.clone())
        seq = torch.cat(out, dim=1)
    print(tag, tuple(seq.shape))
    report(f"{tag}_flex_decode_{new_tokens}_tokens")
    return seq


seq4 = generate(4, 1024, 48, "batch4")
del seq4
seq8 = generate(8, 512, 48, "batch8")
