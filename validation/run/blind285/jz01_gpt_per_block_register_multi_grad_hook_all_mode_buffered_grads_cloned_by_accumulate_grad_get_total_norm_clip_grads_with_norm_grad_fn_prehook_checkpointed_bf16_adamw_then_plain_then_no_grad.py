"""A GPT decoder (12 x 1,536, 16 heads, vocabulary 32,000, fp32 weights, bf16 autocast, fused AdamW,
every block under non-reentrant activation checkpointing, so gradients weigh in the backward's peak)
trained with gradient-ready hooks per stage, as people write to get per-stage gradient statistics or
to start a stage's communication as soon as its gradients exist: one
`torch.autograd.graph.register_multi_grad_hook(stage_params, fn, mode="all")` per stage of four
blocks (and one for the embeddings + final norm + head). In "all" mode the hook keeps every gradient it has
seen in a Python buffer until the stage's last gradient arrives, so AccumulateGrad finds each of those
gradients referenced twice and stores a clone in `.grad` instead of stealing it
(accumulate_grad.h: a new gradient is stolen only when `use_count() <= num_expected_refs`). The
last group holds the head (its gradient comes first) and the token embedding (its gradient comes
last), so the head's gradient is held twice through the whole backward. When a
stage completes, `fn` takes its norm with `torch.nn.utils.get_total_norm` (2.6+) and keeps the 0-d
result. After backward the per-stage norms are combined with `get_total_norm` again and
`torch.nn.utils.clip_grads_with_norm_` clips with that total. A `grad_fn.register_prehook` on the
logits' node rescales the incoming gradient (a new tensor of the logits' size) -- a Node pre-hook,
not a tensor hook. Phase 1: 4 steps of 4 x 1,024 tokens with the hooks. Phase 2: the handles removed,
4 plain steps with `clip_grad_norm_` (the control). Phase 3: no_grad evaluation of 16 x 1,024. 3 phases.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.utils import clip_grads_with_norm_, get_total_norm
from torch.utils.checkpoint import checkpoint

torch.manual_seed(2851)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, D, H, L, T = 32_000, 1536, 16, 12, 1024


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.proj = nn.Linear(D, D, bias=False)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D, bias=False)
        self.out = nn.Linear(4 * D, D, bias=False)

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
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False)
        return self.head(self.ln_f(x))


model = GPT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
# three stages of four blocks, as a pipeline or a gradient bucket would group them
groups = [[p for b in model.blocks[i : i + 4] for p in b.parameters()] for i in range(0, L, 4)]
groups.append(
    list(model.tok.parameters())
    + list(model.pos.parameters())
    + list(model.ln_f.parameters())
    + list(model.head.parameters())
)
stage_norms = {}


def make_fn(i):
    def fn(grads):
        stage_norms[i] = get_total_norm([g for g in grads if g is not None], norm_type=2.0)

    return fn


handles = [register_multi_grad_hook(g, make_fn(i), mode="all") for i, g in enumerate(groups)]
LOGIT_GRAD_SCALE = 0.5


def logit_prehook(grad_outputs):
    return (grad_outputs[0] * LOGIT_GRAD_SCALE,)


def train_step(tokens, hooked):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
    if hooked:
        logits.grad_fn.register_prehook(logit_prehook)
    loss = F.cross_entropy(logits.float().view(-1, V), tokens[:, 1:].reshape(-1))
    loss.backward()
    if hooked:
        total = get_total_norm(list(stage_norms.values()), norm_type=2.0)
        clip_grads_with_norm_(model.parameters(), 1.0, total)
        stage_norms.clear()
    else:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


B = 4
for _ in range(4):
    tokens = torch.randint(0, V, (B, T + 1), device=dev)
    loss = train_step(tokens, hooked=True)
print("hooked train loss", round(loss.item(), 4))
report("train_multi_grad_hooks_all_mode_stage_norms_clip_with_norm")

for h in handles:
    h.remove()
for _ in range(4):
    tokens = torch.randint(0, V, (B, T + 1), device=dev)
    loss = train_step(tokens, hooked=False)
print("plain train loss", round(loss.item(), 4))
report("train_hooks_removed_clip_grad_norm")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    tokens = torch.randint(0, V, (16, T + 1), device=dev)
    logits = model(tokens[:, :-1])
    ev = F.cross_entropy(logits.float().view(-1, V), tokens[:, 1:].reshape(-1))
print("eval loss", round(ev.item(), 4))
report("no_grad_eval_16x1024")
