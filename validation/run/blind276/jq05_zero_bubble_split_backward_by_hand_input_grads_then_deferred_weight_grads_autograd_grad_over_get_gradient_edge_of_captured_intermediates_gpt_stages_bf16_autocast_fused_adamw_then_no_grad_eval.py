"""Zero-bubble pipeline parallelism's split backward (Qi et al. 2024; torch.distributed.pipelining's
stage_backward_input / stage_backward_weight), written by hand and emulated on one GPU: a GPT cut into 4
stages of 2 blocks; each microbatch runs forward stage by stage (each stage's input detached and made to
require grad, as a pipeline stage receives it), then the "B" pass of every stage computes only what the
previous stage needs: `torch.autograd.grad(out, inputs=[x_in, *intermediates], grad_outputs=g,
retain_graph=True)`, where the intermediates are the outputs of the stage's Linear, LayerNorm and Embedding
modules (captured with forward hooks), so the weight branches of their backward nodes are not run. The "W"
pass is deferred: per module, `torch.autograd.grad(outputs=[get_gradient_edge(t)],
inputs=module.parameters(), grad_outputs=[captured grad])` computes its weight gradients from the retained
graph later, and they are accumulated into .grad. d 2048, 16 heads, vocab 32,000, fp32 weights, bf16
autocast, fused AdamW, 8 microbatches of 4 x 1024 tokens per step. Phase 1: 2 steps of plain backward per
microbatch (reference). Phase 2: 2 steps of split backward with each W deferred by 2 microbatches
(ZB-H1-like). Phase 3: 2 steps with every W deferred to the end of the step. Phase 4: no_grad eval of
4 x 2048 tokens. Fixed sizes; seeded."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.graph import get_gradient_edge

torch.manual_seed(2765)
dev = "cuda"
V, D, H, STAGES, PER_STAGE = 32000, 2048, 16, 4, 2
MB, T, M = 4, 1024, 8


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
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class Stage(nn.Module):
    def __init__(self, first, last):
        super().__init__()
        self.first, self.last = first, last
        if first:
            self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(2048, D)
        self.blocks = nn.ModuleList(Block() for _ in range(PER_STAGE))
        if last:
            self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, V, bias=False)

    def forward(self, x, targets=None):
        if self.first:
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for blk in self.blocks:
            x = blk(x)
        if self.last:
            logits = self.head(self.ln(x))
            return (
                logits
                if targets is None
                else F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
            )
        return x


stages = nn.ModuleList(Stage(i == 0, i == STAGES - 1) for i in range(STAGES)).to(dev)
opt = torch.optim.AdamW(stages.parameters(), lr=3e-4, fused=True)
captured = []


def grab(mod, inp, out):
    if torch.is_grad_enabled():
        captured.append((mod, out))


for mod in stages.modules():
    if isinstance(mod, (nn.Linear, nn.LayerNorm, nn.Embedding)):
        mod.register_forward_hook(grab)
report("setup")


def run_forward(tokens, targets):
    saved = []
    x = tokens
    for s, st in enumerate(stages):
        x_in = x if s == 0 else x.detach().requires_grad_(True)
        captured.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = st(x_in, targets) if st.last else st(x_in)
        saved.append((x_in, out, list(captured)))
        x = out
    captured.clear()
    return saved


def backward_input(s, x_in, out, inter, g):
    ins = ([] if s == 0 else [x_in]) + [t for _, t in inter]
    grads = torch.autograd.grad(out, ins, grad_outputs=g, retain_graph=True)
    gx = None if s == 0 else grads[0]
    return gx, list(grads[-len(inter) :])


def backward_weight(s, inter, ginter):
    # one call per module, from its output's edge to its own parameters: a call from several
    # edges at once would also run the paths between them and count those gradients twice
    for (mod, t), gt in zip(inter, ginter, strict=True):
        params = list(mod.parameters())
        gw = torch.autograd.grad([get_gradient_edge(t)], params, grad_outputs=[gt])
        for p, g in zip(params, gw, strict=True):
            p.grad = g if p.grad is None else p.grad.add_(g)


def batch():
    idx = torch.randint(0, V, (MB, T + 1), device=dev)
    return idx[:, :-1], idx[:, 1:]


def step_plain():
    opt.zero_grad(set_to_none=True)
    for _ in range(M):
        saved = run_forward(*batch())
        g = None
        for s in reversed(range(STAGES)):
            x_in, out, _ = saved[s]
            out.backward(g) if g is not None else (out / M).backward()
            g = x_in.grad if s > 0 else None
        loss = saved[-1][1].item()
        del saved, x_in, out
    opt.step()
    return loss


def step_split(lag):
    opt.zero_grad(set_to_none=True)
    pending = []
    for _ in range(M):
        saved = run_forward(*batch())
        g = None
        for s in reversed(range(STAGES)):
            x_in, out, inter = saved[s]
            if g is None:
                out, g = out / M, None
            gx, ginter = backward_input(s, x_in, out, inter, g)
            pending.append((s, inter, ginter))
            g = gx
        loss = saved[-1][1].item()
        del saved, x_in, out, inter, ginter, gx
        while lag is not None and len(pending) > lag * STAGES:
            backward_weight(*pending.pop(0))
    while pending:
        backward_weight(*pending.pop(0))
    opt.step()
    return loss


for i in range(2):
    print(f"plain step {i} loss {step_plain():.4f}")
report("train_plain_backward")

for i in range(2):
    print(f"zb-h1 step {i} loss {step_split(2):.4f}")
report("train_split_backward_w_lag_2")

for i in range(2):
    print(f"zb all-W-deferred step {i} loss {step_split(None):.4f}")
report("train_split_backward_w_at_end")

with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    x = torch.randint(0, V, (4, 2048), device=dev)
    for st in stages:
        x = st(x)
print("eval logits", tuple(x.shape), x.float().std().item())
report("eval_no_grad")
