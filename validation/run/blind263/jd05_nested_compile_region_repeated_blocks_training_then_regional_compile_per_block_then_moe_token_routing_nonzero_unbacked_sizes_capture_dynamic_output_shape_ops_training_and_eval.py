"""Compiling repeated blocks, and sizes only the data decide: a pre-norm transformer (6 blocks, d 768, 12 heads
through SDPA, vocab 16384; fp32 weights, bf16 autocast, foreach AdamW, batch 8 x 512) trained two ways: the
whole model under `torch.compile` with each block's forward a `torch.compiler.nested_compile_region` (traced
once as an `invoke_subgraph` subgraph and called six times), then a second model with the same weights
compiled block by block (`block.compile()`, regional compilation: one graph the six blocks share). Then an
MoE feed-forward (4 experts of 768 -> 3072 -> 768) under `capture_dynamic_output_shape_ops = True`, compiled
with `fullgraph=True`: each expert's tokens are `mask.nonzero()` of a routing mask the program computes
eagerly from token positions (unequal counts that change every step: unbacked sizes, no recompile),
`index_select`, the expert, `index_add_` back; trained three steps over 4,096 tokens, then no_grad at 16,384.

Routes come from `torch.arange` arithmetic (the GPU's counts are the program's). 5 phases."""

import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2635)
V, D, H, L, B, T, E = 16384, 768, 12, 6, 8, 512, 4


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
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.n2(x))))


class NestedBlock(Block):
    @torch.compiler.nested_compile_region
    def forward(self, x):
        return Block.forward(self, x)


class LM(nn.Module):
    def __init__(self, block):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def train(model, fn, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
    for _ in range(steps):
        idx = torch.randint(0, V, (B, T + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(fn(idx[:, :-1]).float().flatten(0, 1), idx[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


nested = LM(NestedBlock).cuda()
report("setup")

train(nested, torch.compile(nested), 2)
report("train_nested_compile_region_blocks")

regional = LM(Block).cuda()
regional.load_state_dict(nested.state_dict())
del nested
gc.collect()
for blk in regional.blocks:
    blk.compile()
train(regional, regional, 2)
del regional, blk
gc.collect()
report("train_regional_compile_per_block")

torch._dynamo.config.capture_dynamic_output_shape_ops = True
experts = nn.ModuleList(nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)) for _ in range(E)).cuda()
norm = nn.LayerNorm(D).cuda()


@torch.compile(fullgraph=True)
def moe(x, masks):
    h = norm(x)
    out = torch.zeros_like(h)
    for expert, mask in zip(experts, masks):
        idx = mask.nonzero().squeeze(1)
        out.index_add_(0, idx, expert(h.index_select(0, idx)))
    return x + out


def routes(n, step):
    # token i goes to expert ((i * (step + 3)) % 7) % E: unequal counts, different every step
    pos = torch.arange(n, device="cuda")
    r = (pos * (step + 3)) % 7 % E
    return [r == e for e in range(E)]


opt = torch.optim.AdamW([*experts.parameters(), *norm.parameters()], lr=1e-4, foreach=True)
for step in range(3):
    x = torch.randn(B * T, D, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = moe(x, routes(B * T, step)).float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
report("train_moe_nonzero_unbacked_token_counts")

with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    y = moe(torch.randn(4 * B * T, D, device="cuda"), routes(4 * B * T, 5))
    del y
report("eval_moe_no_grad_16384_tokens")
