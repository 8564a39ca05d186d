"""Debugging a torch.compile failure the usual way: the same GPT-style model compiled with dynamo's debug
backends, first `backend="eager"` (dynamo only), then `backend="aot_eager"` (dynamo + AOTAutograd with its
partitioner, no Inductor), fp32 weights with TF32 matmuls.
The model (6 pre-LN blocks, d 768, 12 heads, SDPA causal, MLP 4x) calls two helpers: `token_usage_stats`,
decorated `@torch.compiler.disable` (it reads `.item()` values for logging: a graph break dynamo skips), and
`bias_gelu`, registered with `torch.compiler.allow_in_graph` (dynamo puts the call in its graph unexamined).
Phase 1, `torch.compile(model, backend="eager")`: 4 AdamW steps at batch 8 over sequence lengths 512, 512,
768, 1,024, the inputs' sequence dimension marked with `torch._dynamo.mark_dynamic` (one dynamic graph).
Phase 2, `torch.compiler.reset()` and `torch.compile(model, backend="aot_eager")`: 4 more steps, the same
lengths and marks, so AOTAutograd's joint graph and min-cut partition decide what the forward keeps for the
backward.
Phase 3, an evaluation function (no stats helper) compiled with `backend="aot_eager", fullgraph=True,
dynamic=False` under `torch.no_grad()`: 3 batches of 16 x 1,024 tokens, mean loss.
3 phases."""

import math

import torch
import torch._dynamo
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2933)
torch.backends.cuda.matmul.allow_tf32 = True
dev = "cuda"
V, D, NH, L = 16384, 768, 12, 6


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


STATS = []


@torch.compiler.disable
def token_usage_stats(idx, logits):
    """Logging of the batch's token diversity and the logits' scale: host syncs, kept out of the graph."""
    STATS.append((torch.unique(idx).numel(), logits.detach().float().abs().mean().item()))


def bias_gelu(x, b):
    return F.gelu(x + b, approximate="tanh")


torch.compiler.allow_in_graph(bias_gelu)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.fc = nn.Linear(D, 4 * D, bias=False)
        self.fc_b = nn.Parameter(torch.zeros(4 * D))
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, NH, D // NH).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.out(bias_gelu(self.fc(self.ln2(x)), self.fc_b))


class GPT(nn.Module):
    def __init__(self, with_stats=True):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(1024, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.with_stats = with_stats

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln(x), self.tok.weight)
        loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
        if self.with_stats:
            token_usage_stats(idx, logits)
        return loss


model = GPT().to(dev)
for n, p in model.named_parameters():
    if n.endswith("out.weight") or n.endswith("proj.weight"):
        nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)


def batch(b, t):
    idx = torch.randint(0, V, (b, t + 1), device=dev)
    x, y = idx[:, :-1].contiguous(), idx[:, 1:].contiguous()
    torch._dynamo.mark_dynamic(x, 1)
    torch._dynamo.mark_dynamic(y, 1)
    return x, y


def train(compiled, tag):
    for t in (512, 512, 768, 1024):
        x, y = batch(8, t)
        loss = compiled(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(tag, "T", t, "loss", round(loss.item(), 4), "stats", STATS[-1][0])
    del x, y, loss


# --- phase 1: dynamo only ---------------------------------------------------------------------------------
train(torch.compile(model, backend="eager"), "eager-backend")
report("compile_backend_eager_mark_dynamic")

# --- phase 2: dynamo + AOTAutograd ------------------------------------------------------------------------
torch.compiler.reset()
train(torch.compile(model, backend="aot_eager"), "aot_eager")
report("compile_backend_aot_eager_partitioned")

# --- phase 3: fullgraph aot_eager evaluation --------------------------------------------------------------
model.eval()
model.with_stats = False


@torch.compile(backend="aot_eager", fullgraph=True, dynamic=False)
def evaluate(idx, targets):
    return model(idx, targets)


losses = []
with torch.no_grad():
    for _ in range(3):
        idx = torch.randint(0, V, (16, 1025), device=dev)
        losses.append(evaluate(idx[:, :-1].contiguous(), idx[:, 1:].contiguous()).item())
print("eval loss", round(sum(losses) / 3, 4))
del idx
report("aot_eager_fullgraph_no_grad_eval")
