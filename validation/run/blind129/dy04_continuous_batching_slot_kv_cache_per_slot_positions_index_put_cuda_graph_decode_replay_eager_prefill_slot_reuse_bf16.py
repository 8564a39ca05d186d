"""Continuous batching emulated by hand: a GPT-NeoX-style decoder (20 layers, 2,560 wide, 20 heads,
parallel attention and MLP residuals, vocabulary 50,304, bf16) serves a queue of 96 requests (prompts
of 128 to 1,024 tokens, 32 to 256 new tokens, drawn on the host) through 32 slots of a preallocated
KV cache (per layer 32 x 20 x 1,280 x 128 for K and V). Each admitted request is prefilled eagerly
into a free slot (causal SDPA, its K and V copied into the slot); the decode step of all 32 slots at
once (per-slot positions in a GPU tensor, the new K and V written with index_put_, a bool mask up to
each slot's position, the argmax copied back into the static token tensor, idle slots computed as
padding) is warmed up on a side stream, captured once with torch.cuda.graph and replayed; a finished
request's slot is reused by the next in the queue. Phases: capture, the first 160 decode steps, the
rest of the queue, then the graph dropped and the cache emptied; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12904)
if SMALL:
    LAYERS, D, H, V = 2, 64, 4, 500
    SLOTS, MAXLEN, NREQ, PLO, PHI, OLO, OHI, FIRST = 4, 64, 10, 8, 32, 4, 16, 10
else:
    LAYERS, D, H, V = 20, 2560, 20, 50304
    SLOTS, MAXLEN, NREQ, PLO, PHI, OLO, OHI, FIRST = 32, 1280, 96, 128, 1024, 32, 256, 160
HD = D // H
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_attn, self.ln_mlp = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.dense = nn.Linear(D, D)
        self.up = nn.Linear(D, 4 * D)
        self.down = nn.Linear(4 * D, D)

    def forward(self, x, k_cache, v_cache, slot=None, pos=None):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln_attn(x)).view(b, n, 3, H, HD).permute(2, 0, 3, 1, 4)
        if pos is None:  # prefill of one request into its slot
            k_cache[slot, :, :n] = k[0]
            v_cache[slot, :, :n] = v[0]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # decode: every slot writes its position, then attends up to it
            rows = torch.arange(b, device=x.device)
            k_cache[rows, :, pos] = k[:, :, 0]
            v_cache[rows, :, pos] = v[:, :, 0]
            mask = (torch.arange(MAXLEN, device=x.device)[None] <= pos[:, None]).view(b, 1, 1, MAXLEN)
            y = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        attn = self.dense(y.transpose(1, 2).reshape(b, n, D))
        return x + attn + self.down(F.gelu(self.up(self.ln_mlp(x))))


class GPTNeoX(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.pos = nn.Embedding(MAXLEN, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.out = nn.Linear(D, V, bias=False)

    def forward(self, ids, positions, slot=None, pos=None):
        x = self.embed(ids) + self.pos(positions)
        for blk, (kc, vc) in zip(self.blocks, caches, strict=True):
            x = blk(x, kc, vc, slot, pos)
        return self.out(self.ln_f(x[:, -1:]))


model = GPTNeoX().to(device=device, dtype=dtype).eval()
caches = [
    (
        torch.zeros(SLOTS, H, MAXLEN, HD, device=device, dtype=dtype),
        torch.zeros(SLOTS, H, MAXLEN, HD, device=device, dtype=dtype),
    )
    for _ in range(LAYERS)
]
gen = torch.Generator().manual_seed(129040)
queue = [
    (int(torch.randint(PLO, PHI + 1, (), generator=gen)), int(torch.randint(OLO, OHI + 1, (), generator=gen)))
    for _ in range(NREQ)
]
static_tok = torch.zeros(SLOTS, 1, dtype=torch.long, device=device)
static_pos = torch.zeros(SLOTS, dtype=torch.long, device=device)
if device == "cuda":
    print(f"model and cache {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def decode_step():
    logits = model(static_tok, static_pos.view(SLOTS, 1), pos=static_pos)
    static_tok.copy_(logits.argmax(-1))
    static_pos.add_(1)
    return logits


def report(name):
    if device == "cuda":
        print(
            f"{name} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name}")


with torch.inference_mode():
    if device == "cuda":
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                decode_step()
        torch.cuda.current_stream().wait_stream(side)
        static_pos.zero_()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_logits = decode_step()
        static_pos.zero_()
    report("capture")

    remaining = [0] * SLOTS  # tokens still to generate per slot; 0 = idle
    next_req, steps, done = 0, 0, 0

    def admit(slot):
        global next_req
        n, out_len = queue[next_req]
        next_req += 1
        prompt = torch.randint(0, V, (1, n), device=device)
        logits = model(prompt, torch.arange(n, device=device)[None], slot=slot)
        static_tok[slot] = logits[0].argmax(-1)
        static_pos[slot] = n
        remaining[slot] = out_len

    while done < NREQ:
        for slot in range(SLOTS):
            if remaining[slot] == 0 and next_req < NREQ:
                admit(slot)
        if device == "cuda":
            graph.replay()
        else:
            decode_step()
        steps += 1
        for slot in range(SLOTS):
            if remaining[slot] > 0:
                remaining[slot] -= 1
                if remaining[slot] == 0:
                    done += 1
                    static_pos[slot] = 0
        if steps == FIRST:
            report(f"first {FIRST} steps done {done}")
    report(f"queue drained steps {steps}")
    if device == "cuda":
        del graph, static_logits
        torch.cuda.empty_cache()
    report("graph dropped")
