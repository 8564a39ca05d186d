"""TTT-Linear (Sun et al. 2024, "Learning to (Learn at Test Time)") written from the paper in its primal
form: every head's hidden state is the weight matrix W of an inner linear model. For each mini-batch
of 16 tokens the inner loss ||LN(theta_K x @ W) + theta_K x - theta_V x||^2 is differentiated with
``torch.func.grad`` (vmapped over batch and heads), W takes one gradient step with a learnable,
token-dependent inner learning rate (sigmoid of a linear projection), and the mini-batch's outputs are
read out as LN(theta_Q x @ W) + theta_Q x with the updated W. The outer loop trains all theta's, W0
and the inner LayerNorm by backpropagating through the unrolled inner loop (gradients of gradients).

Phases: 0 model and a synthetic Markov-chain token stream on the GPU; 1 outer training in float32 with
TF32 matmuls and Adam; 2 evaluation at twice the context under bf16 autocast and no_grad (the inner
gradient steps still run, torch.func.grad ignores the outer no_grad); 3 training steps under fp16
autocast with a GradScaler (activation checkpointing is not an option: torch.func.grad refuses saved
tensor hooks)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import grad, vmap

torch.manual_seed(11)
device = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True

VOCAB, D, HEADS, LAYERS, MB = 2048, 384, 6, 3, 16
DH = D // HEADS


def report(tag):
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def ln(x, w, b, eps=1e-6):
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def inner_loss(W, b0, xk, xv, lnw, lnb):
    z = xk @ W + b0
    return ((ln(z, lnw, lnb) + xk - xv) ** 2).sum()


inner_grad = vmap(grad(inner_loss, argnums=(0, 1)), in_dims=(0, 0, 0, 0, None, None))


class TTTLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(D, D, bias=False)
        self.v = nn.Linear(D, D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.lr_proj = nn.Linear(D, HEADS)
        self.W0 = nn.Parameter(torch.randn(HEADS, DH, DH) * 0.02)
        self.b0 = nn.Parameter(torch.zeros(HEADS, 1, DH))
        self.ln_w = nn.Parameter(torch.ones(DH))
        self.ln_b = nn.Parameter(torch.zeros(DH))
        self.post = nn.LayerNorm(D)

    def forward(self, x):
        b, t, _ = x.shape
        split = lambda z: z.view(b, t, HEADS, DH).transpose(1, 2).reshape(b * HEADS, t, DH)  # noqa: E731
        xq, xk, xv = split(self.q(x)), split(self.k(x)), split(self.v(x))
        eta = (torch.sigmoid(self.lr_proj(x)) / DH).transpose(1, 2).reshape(b * HEADS, t, 1)
        W = self.W0.repeat(b, 1, 1)
        b0 = self.b0.repeat(b, 1, 1)
        outs = []
        for s in range(0, t, MB):
            k_mb, v_mb, q_mb, e_mb = (
                xk[:, s : s + MB],
                xv[:, s : s + MB],
                xq[:, s : s + MB],
                eta[:, s : s + MB],
            )
            gW, gb = inner_grad(W, b0, k_mb * e_mb.sqrt(), v_mb * e_mb.sqrt(), self.ln_w, self.ln_b)
            lr = e_mb.mean(1, keepdim=True)
            W = W - lr * gW
            b0 = b0 - lr * gb
            outs.append(ln(q_mb @ W + b0, self.ln_w, self.ln_b) + q_mb)
        out = torch.cat(outs, dim=1).view(b, HEADS, t, DH).transpose(1, 2).reshape(b, t, D)
        return self.o(self.post(out))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.ttt = TTTLinear()
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(approximate="tanh"), nn.Linear(4 * D, D))

    def forward(self, x):
        x = x + self.ttt(self.n1(x))
        return x + self.mlp(self.n2(x))


class TTTLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


# order-2 Markov chain stream
trans = torch.softmax(torch.randn(64, VOCAB, device=device) * 3, dim=-1)


def sample_stream(bsz, t):
    ids = torch.empty(bsz, t, dtype=torch.long, device=device)
    ids[:, 0] = torch.randint(0, VOCAB, (bsz,), device=device)
    for i in range(1, t):
        ids[:, i] = torch.multinomial(trans[ids[:, i - 1] % 64], 1).squeeze(1)
    return ids


model = TTTLM().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
train_ids = sample_stream(16, 257)
print("params", sum(p.numel() for p in model.parameters()))
report("phase0 build")

for step in range(3):
    logits = model(train_ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), train_ids[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print("train loss", round(loss.item(), 3))
report("phase1 train_fp32")

model.eval()
eval_ids = sample_stream(8, 513)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    logits = model(eval_ids[:, :-1])
    nll = F.cross_entropy(logits.float().flatten(0, 1), eval_ids[:, 1:].flatten(), reduction="none")
print(
    "eval nll first/second half",
    round(nll[: nll.numel() // 2].mean().item(), 3),
    round(nll[nll.numel() // 2 :].mean().item(), 3),
)
report("phase2 bf16_eval")

model.train()
scaler = torch.amp.GradScaler("cuda")
for step in range(2):
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(train_ids[:, :-1])
        loss = F.cross_entropy(logits.float().flatten(0, 1), train_ids[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
print("fp16 train loss", round(loss.item(), 3), "scale", scaler.get_scale())
report("phase3 fp16_gradscaler_train")
