"""Compiled autograd as PyTorch's tutorial writes it: `torch._dynamo.config.compiled_autograd = True`
set before `torch.compile`, and `loss.backward()` called inside the compiled training-step function
(compiled autograd is enabled for the dynamic extent of a compiled call, torch/_dynamo/eval_frame.py
`call_compiled_autograd`): dynamo compiles the forward and loss up to the graph break at
`backward()`, then the autograd engine hands the whole backward to compiled autograd, which traces it
(the forward's AOT backward graph pasted in, each parameter's AccumulateGrad) and compiles it with
Inductor. A 4-layer GPT written by hand (width 768, 12 heads through SDPA causal, MLP 3072, vocabulary
16384, tied embeddings), fp32, AdamW (foreach) stepped outside the compiled function, batch 8 x 512.
Three steps; then two steps at batch 4 x 512 (a changed size: dynamo recompiles the forward, and
compiled autograd marks the changed sizes dynamic and captures again); then an evaluation loss under
no_grad through a second compiled function at batch 16. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch._dynamo.config.compiled_autograd = True
torch.manual_seed(25701)
V, D, L, H, T = 16384, 768, 4, 12, 512


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
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)


@torch.compile
def train_step(idx, tgt):
    logits = model(idx)
    loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1))
    loss.backward()
    return loss.detach()


@torch.compile
def eval_loss(idx, tgt):
    return F.cross_entropy(model(idx).view(-1, V), tgt.view(-1))


def batch(b):
    idx = torch.randint(0, V, (b, T), device="cuda")
    return idx, torch.roll(idx, -1, dims=1)


report("setup")

idx, tgt = batch(8)
train_step(idx, tgt)
opt.step()
opt.zero_grad(set_to_none=True)
report("step0_compile_forward_and_backward")

for _ in range(2):
    idx, tgt = batch(8)
    train_step(idx, tgt)
    opt.step()
    opt.zero_grad(set_to_none=True)
report("steps1_2_cached_graphs")

for _ in range(2):
    idx, tgt = batch(4)
    train_step(idx, tgt)
    opt.step()
    opt.zero_grad(set_to_none=True)
report("batch4_recompile_dynamic")

model.eval()
with torch.no_grad():
    idx, tgt = batch(16)
    loss = eval_loss(idx, tgt)
    del loss
report("eval_no_grad_batch16")
