"""Automatic dynamic shapes, then their absence: a 4-layer GPT (d 768, 12 heads through SDPA, vocab 32000,
fp32 weights, bf16 autocast, AdamW foreach) compiled with the default settings and trained on raw (unpadded)
sequence lengths 128 (a static graph), 256 (dynamo recompiles with the sequence length dynamic:
`automatic_dynamic_shapes`), then 192 and 320 (the dynamic graph serves both). Then `torch._dynamo.reset()`,
`automatic_dynamic_shapes = False` and `recompile_limit = 3`: a no_grad bf16 evaluation compiles one static
graph per length at 100, 200 and 300, and at 400 and 500 the limit is reached and the forward runs eagerly.

Sizes are fixed by the program (no value-dependent sizes). 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2631)
V, D, H, L, B = 32000, 768, 12, 4, 8


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
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).split(D, dim=-1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.n2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(1024, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
compiled = torch.compile(model)
report("setup")


def train_step(t):
    idx = torch.randint(0, V, (B, t + 1), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = compiled(idx[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train_step(128)
report("train_seq128_static_graph")

train_step(256)
report("train_seq256_recompile_automatic_dynamic")

train_step(192)
train_step(320)
report("train_seq192_and_320_dynamic_graph_reused")

torch._dynamo.reset()
torch._dynamo.config.automatic_dynamic_shapes = False
torch._dynamo.config.recompile_limit = 3
model.eval()
evaluator = torch.compile(model)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for t in (100, 200, 300, 400, 500):
        logits = evaluator(torch.randint(0, V, (B, t), device="cuda"))
        del logits
report("eval_static_per_length_then_recompile_limit_eager")
