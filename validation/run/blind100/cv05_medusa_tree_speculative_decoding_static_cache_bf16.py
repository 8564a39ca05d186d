"""Medusa-style speculative decoding by hand: a GPT decoder (16 layers, 1,536 wide, 12 heads, a
50,304 vocabulary) with 4 Medusa heads (a residual SiLU block and its own LM head each), bf16 under
torch.inference_mode, a preallocated static KV cache read through boolean masks: prefill of a
2,048-token prompt, then 24 rounds of tree verification (a 16-node candidate tree from the heads'
top-k tokens, one forward with a tree attention mask, the longest accepted path's keys and values
moved into place with index_select and index_copy_), then 32 plain greedy steps for comparison;
3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10005)
if SMALL:
    DIM, LAYERS, HEADS, VOCAB, PROMPT, ROUNDS, GREEDY = 64, 2, 4, 128, 32, 4, 4
else:
    DIM, LAYERS, HEADS, VOCAB, PROMPT, ROUNDS, GREEDY = 1536, 16, 12, 50304, 2048, 24, 32
HD = DIM // HEADS
MEDUSA = 4
PATHS = [
    (0,), (1,), (2,), (3,), (0, 0), (0, 1), (1, 0), (2, 0),
    (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1), (0, 1, 0, 0), (0, 0, 1, 0),
]  # fmt: skip
MAXLEN = PROMPT + ROUNDS * (MEDUSA + 1) + GREEDY + len(PATHS) + 8
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)
        self.ln2 = nn.LayerNorm(DIM)
        self.fc = nn.Linear(DIM, 4 * DIM)
        self.out = nn.Linear(4 * DIM, DIM)

    def forward(self, x, kc, vc, slots, mask):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        kc.index_copy_(2, slots, k)
        vc.index_copy_(2, slots, v)
        a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, DIM))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class MedusaGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, DIM)
        self.wpe = nn.Embedding(MAXLEN, DIM)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)
        self.medusa = nn.ModuleList(
            nn.ModuleDict({"res": nn.Linear(DIM, DIM), "head": nn.Linear(DIM, VOCAB, bias=False)})
            for _ in range(MEDUSA)
        )

    def forward(self, ids, pos, cache, slots, mask):
        x = self.wte(ids) + self.wpe(pos)
        for blk, (kc, vc) in zip(self.blocks, cache, strict=True):
            x = blk(x, kc, vc, slots, mask)
        return self.ln_f(x)

    def heads(self, h):
        return torch.stack([m["head"](h + F.silu(m["res"](h))) for m in self.medusa])


model = MedusaGPT().to(device=device, dtype=dtype).eval()

# the candidate tree: node 0 is the root (the last accepted token), node i + 1 is PATHS[i]
nodes = len(PATHS) + 1
depth = torch.tensor([0] + [len(p) for p in PATHS])
tree_mask = torch.eye(nodes, dtype=torch.bool)
tree_mask[:, 0] = True
for i, p in enumerate(PATHS):
    for j in range(1, len(p)):
        tree_mask[i + 1, PATHS.index(p[:j]) + 1] = True
leaves = [i for i, p in enumerate(PATHS) if not any(q[: len(p)] == p and q != p for q in PATHS)]
retrieve = torch.zeros(len(leaves), MEDUSA + 1, dtype=torch.long)
for r, i in enumerate(leaves):
    p = PATHS[i]
    for j in range(1, len(p) + 1):
        retrieve[r, j] = PATHS.index(p[:j]) + 1
    retrieve[r, len(p) + 1 :] = retrieve[r, len(p)]
choice = torch.tensor([[0] + [p[-1] for p in PATHS]])
head_of = depth.clamp(min=1) - 1
depth, tree_mask, retrieve, choice, head_of = (
    t.to(device) for t in (depth, tree_mask, retrieve, choice, head_of)
)

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    cache = [
        (
            torch.zeros(1, HEADS, MAXLEN, HD, device=device, dtype=dtype),
            torch.zeros(1, HEADS, MAXLEN, HD, device=device, dtype=dtype),
        )
        for _ in range(LAYERS)
    ]
    cols = torch.arange(MAXLEN, device=device)
    prompt = torch.randint(0, VOCAB, (1, PROMPT), device=device)
    pos = torch.arange(PROMPT, device=device)
    mask = (cols[None, :] <= pos[:, None]) & (cols[None, :] < PROMPT)
    h = model(prompt, pos[None], cache, pos, mask[None, None])
    last = model.lm_head(h[:, -1]).argmax(-1)
    spec = model.heads(h[:, -1])
    cur = PROMPT
    if device == "cuda":
        print(f"prefill peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

    accepted_total = 0
    for _ in range(ROUNDS):
        topk = spec[:, 0].topk(4, dim=-1).indices
        tokens = torch.cat([last, topk[head_of[1:], choice[0, 1:]]])[None]
        slots = cur + torch.arange(nodes, device=device)
        tmask = torch.zeros(nodes, MAXLEN, dtype=torch.bool, device=device)
        tmask[:, :cur] = True
        tmask[:, cur : cur + nodes] = tree_mask
        h = model(tokens, (cur + depth)[None], cache, slots, tmask[None, None])
        pred = model.lm_head(h[0]).argmax(-1)
        cand = tokens[0][retrieve]
        match = (cand[:, 1:] == pred[retrieve[:, :-1]]).int().cumprod(dim=1).sum(dim=1)
        best = int(match.argmax().item())
        acc = int(match[best].item())
        path = retrieve[best]
        for kc, vc in cache:
            kc.index_copy_(2, cur + torch.arange(MEDUSA + 1, device=device), kc[:, :, cur + path])
            vc.index_copy_(2, cur + torch.arange(MEDUSA + 1, device=device), vc[:, :, cur + path])
        node = path[acc]
        last = pred[node][None]
        spec = model.heads(h[:, node])
        cur += acc + 1
        accepted_total += acc + 1
    print(f"medusa tokens {accepted_total} in {ROUNDS} rounds")
    if device == "cuda":
        print(f"medusa peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

    for _ in range(GREEDY):
        slot = torch.tensor([cur], device=device)
        h = model(last[None], slot[None], cache, slot, (cols <= cur)[None, None, None])
        last = model.lm_head(h[:, -1]).argmax(-1)
        cur += 1
    print(f"greedy to {cur}")
    if device == "cuda":
        print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
