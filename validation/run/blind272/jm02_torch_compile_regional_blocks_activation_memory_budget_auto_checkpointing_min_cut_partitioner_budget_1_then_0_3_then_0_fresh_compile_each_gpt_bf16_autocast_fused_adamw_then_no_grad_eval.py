"""torch.compile's memory-budget activation checkpointing ("auto AC", PyTorch 2.4+):
`torch._functorch.config.activation_memory_budget` tells AOTAutograd's min-cut partitioner
(`min_cut_rematerialization_partition`) how much of the activations it may keep for the backward --
1.0 is the ordinary runtime-optimal min cut, 0.0 recomputes everything recomputable, values in between
solve a knapsack over the saved tensors by their size and their recomputation runtime (estimated from
FLOPs). A GPT decoder (12 x 1,024, 16 heads, MLP 4x with GELU, vocabulary 32,768, untied head) trained with
regional compilation (`block.compile()` on each of the 12 identical blocks, so one graph serves them all;
embeddings, final norm, head and loss eager) under bf16 autocast with fused AdamW at 8 x 2,048 tokens,
once per budget: 1.0, 0.3 and 0.0, each with `torch._dynamo.reset()`, a fresh model and optimizer and
the budget set by `torch._functorch.config.patch` around the compiling steps (3 steps each). Then a no_grad
evaluation of the last model. Synthetic tokens, seeded. Fixed sizes. 5 phases (setup, three budgets,
eval)."""

import torch
import torch._functorch.config as functorch_config
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2722)
dev = "cuda"
V, D, H, L, T, B = 32768, 1024, 16, 12, 2048, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc, self.out = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


gen = torch.Generator().manual_seed(11)


def batch():
    data = torch.randint(0, V, (B, T + 1), generator=gen).to(dev)
    return data[:, :-1], data[:, 1:]


report("setup")
model = None
for budget in (1.0, 0.3, 0.0):
    torch._dynamo.reset()
    model = opt = None
    model = GPT().to(dev)
    for blk in model.blocks:
        blk.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    with functorch_config.patch(activation_memory_budget=budget):
        for _ in range(3):
            x, y = batch()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x).view(-1, V), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    print(f"budget {budget}: loss {loss.item():.4f}")
    report(f"budget_{budget}")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    x, y = batch()
    print("eval loss", F.cross_entropy(model(x).view(-1, V), y.reshape(-1)).item())
report("eval")
