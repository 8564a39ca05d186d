"""A Mamba language model written the mamba.py way (alxndrTL/mamba.py): pure PyTorch, no CUDA kernel,
the selective scan computed by a Blelloch parallel scan `PScan`, a `torch.autograd.Function` whose
forward clones (or zero-pads to the next power of two) the (B, L, ED, N) tensors deltaA and deltaB*x,
transposes them to (B, ED, L, N) *views* and runs log2(L) in-place up-sweep and down-sweep steps on
strided views of them (`Xa[:, :, :, 1].add_(Aa[:, :, :, 1].mul(Xa[:, :, :, 0]))`,
`Aa[:, :, :, 1].mul_(...)`, `A[:, :, 2**k-1:L:2**k].view(B, D, T//2, 2, -1)`), and whose backward
runs the reversed scan on the padded, shifted A and the gradient, then forms Q with a shifted
product. 8 residual Mamba blocks (RMSNorm by hand, in_proj to 2 x 1,536, depthwise causal Conv1d of
width 4, x_proj to dt_rank 48 + 2 x 16, dt_proj by hand (`weight @ delta.T`, softplus), A = -exp(A_log),
the skip D), d_model 768, vocabulary 16,384 with tied embedding, fp32 with TF32 matmuls. Phase 1:
4 AdamW steps at batch 4 x 1,024 (a power of two: the clone path). Phase 2: no_grad evaluation at
batch 4 x 1,536 (not a power of two: `pad_npo2` pads the scan to 2,048). Phase 3: recurrent decoding
as mamba.py's `step` does, under inference_mode: a prompt of 64 tokens fed one step at a time into a
cache of (h (B, ED, N), conv inputs (B, ED, 3)) per layer, then 32 greedy tokens. Fixed sizes. 3 phases."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2681)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def npo2(length):
    return 2 ** math.ceil(math.log2(length))


def pad_npo2(X):
    # X: (B, L, D, N) -> (B, npo2(L), D, N)
    return F.pad(X, (0, 0, 0, 0, 0, npo2(X.size(1)) - X.size(1)), "constant", 0)


class PScan(torch.autograd.Function):
    @staticmethod
    def pscan(A, X):
        # A, X: (B, D, L, N), modified in place
        B, D, L, _ = A.size()
        num_steps = int(math.log2(L))
        Aa, Xa = A, X
        for _ in range(num_steps - 2):
            T = Xa.size(2)
            Aa = Aa.view(B, D, T // 2, 2, -1)
            Xa = Xa.view(B, D, T // 2, 2, -1)
            Xa[:, :, :, 1].add_(Aa[:, :, :, 1].mul(Xa[:, :, :, 0]))
            Aa[:, :, :, 1].mul_(Aa[:, :, :, 0])
            Aa = Aa[:, :, :, 1]
            Xa = Xa[:, :, :, 1]
        if Xa.size(2) == 4:
            Xa[:, :, 1].add_(Aa[:, :, 1].mul(Xa[:, :, 0]))
            Aa[:, :, 1].mul_(Aa[:, :, 0])
            Xa[:, :, 3].add_(Aa[:, :, 3].mul(Xa[:, :, 2] + Aa[:, :, 2].mul(Xa[:, :, 1])))
        elif Xa.size(2) == 2:
            Xa[:, :, 1].add_(Aa[:, :, 1].mul(Xa[:, :, 0]))
            return
        else:
            return
        Aa = A[:, :, 2 ** (num_steps - 2) - 1 : L : 2 ** (num_steps - 2)]
        Xa = X[:, :, 2 ** (num_steps - 2) - 1 : L : 2 ** (num_steps - 2)]
        Xa[:, :, 2].add_(Aa[:, :, 2].mul(Xa[:, :, 1]))
        Aa[:, :, 2].mul_(Aa[:, :, 1])
        for k in range(num_steps - 3, -1, -1):
            Aa = A[:, :, 2**k - 1 : L : 2**k]
            Xa = X[:, :, 2**k - 1 : L : 2**k]
            T = Xa.size(2)
            Aa = Aa.view(B, D, T // 2, 2, -1)
            Xa = Xa.view(B, D, T // 2, 2, -1)
            Xa[:, :, 1:, 0].add_(Aa[:, :, 1:, 0].mul(Xa[:, :, :-1, 1]))
            Aa[:, :, 1:, 0].mul_(Aa[:, :, :-1, 1])

    @staticmethod
    def pscan_rev(A, X):
        B, D, L, _ = A.size()
        num_steps = int(math.log2(L))
        Aa, Xa = A, X
        for _ in range(num_steps - 2):
            T = Xa.size(2)
            Aa = Aa.view(B, D, T // 2, 2, -1)
            Xa = Xa.view(B, D, T // 2, 2, -1)
            Xa[:, :, :, 0].add_(Aa[:, :, :, 0].mul(Xa[:, :, :, 1]))
            Aa[:, :, :, 0].mul_(Aa[:, :, :, 1])
            Aa = Aa[:, :, :, 0]
            Xa = Xa[:, :, :, 0]
        if Xa.size(2) == 4:
            Xa[:, :, 2].add_(Aa[:, :, 2].mul(Xa[:, :, 3]))
            Aa[:, :, 2].mul_(Aa[:, :, 3])
            Xa[:, :, 0].add_(Aa[:, :, 0].mul(Xa[:, :, 1].add(Aa[:, :, 1].mul(Xa[:, :, 2]))))
        elif Xa.size(2) == 2:
            Xa[:, :, 0].add_(Aa[:, :, 0].mul(Xa[:, :, 1]))
            return
        else:
            return
        Aa = A[:, :, 0 : L : 2 ** (num_steps - 2)]
        Xa = X[:, :, 0 : L : 2 ** (num_steps - 2)]
        Xa[:, :, 1].add_(Aa[:, :, 1].mul(Xa[:, :, 2]))
        Aa[:, :, 1].mul_(Aa[:, :, 2])
        for k in range(num_steps - 3, -1, -1):
            Aa = A[:, :, 0 : L : 2**k]
            Xa = X[:, :, 0 : L : 2**k]
            T = Xa.size(2)
            Aa = Aa.view(B, D, T // 2, 2, -1)
            Xa = Xa.view(B, D, T // 2, 2, -1)
            Xa[:, :, :-1, 1].add_(Aa[:, :, :-1, 1].mul(Xa[:, :, 1:, 0]))
            Aa[:, :, :-1, 1].mul_(Aa[:, :, 1:, 0])

    @staticmethod
    def forward(ctx, A_in, X_in):
        L = X_in.size(1)
        if L == npo2(L):
            A, X = A_in.clone(), X_in.clone()
        else:
            A, X = pad_npo2(A_in), pad_npo2(X_in)
        A, X = A.transpose(2, 1), X.transpose(2, 1)
        PScan.pscan(A, X)
        ctx.save_for_backward(A_in, X)
        return X.transpose(2, 1)[:, :L]

    @staticmethod
    def backward(ctx, grad_output_in):
        A_in, X = ctx.saved_tensors
        L = grad_output_in.size(1)
        grad_output = grad_output_in.clone() if L == npo2(L) else pad_npo2(grad_output_in)
        A_in = pad_npo2(A_in)
        grad_output = grad_output.transpose(2, 1)
        A_in = A_in.transpose(2, 1)
        A = F.pad(A_in[:, :, 1:], (0, 0, 0, 1))
        PScan.pscan_rev(A, grad_output)
        Q = torch.zeros_like(X)
        Q[:, :, 1:].add_(X[:, :, :-1] * grad_output[:, :, 1:])
        return Q.transpose(2, 1)[:, :L], grad_output.transpose(2, 1)[:, :L]


pscan = PScan.apply

VOCAB, D_MODEL, LAYERS, D_STATE, EXPAND, D_CONV = 16384, 768, 8, 16, 2, 4
ED = EXPAND * D_MODEL
DT_RANK = math.ceil(D_MODEL / 16)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MambaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(D_MODEL, 2 * ED, bias=False)
        self.conv1d = nn.Conv1d(ED, ED, kernel_size=D_CONV, bias=True, groups=ED, padding=D_CONV - 1)
        self.x_proj = nn.Linear(ED, DT_RANK + 2 * D_STATE, bias=False)
        self.dt_proj = nn.Linear(DT_RANK, ED, bias=True)
        dt = torch.exp(torch.rand(ED) * (math.log(0.1) - math.log(0.001)) + math.log(0.001)).clamp(min=1e-4)
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.arange(1, D_STATE + 1, dtype=torch.float32).repeat(ED, 1)))
        self.D = nn.Parameter(torch.ones(ED))
        self.out_proj = nn.Linear(ED, D_MODEL, bias=False)

    def forward(self, x):
        _, L, _ = x.shape
        x, z = self.in_proj(x).chunk(2, dim=-1)
        x = self.conv1d(x.transpose(1, 2))[:, :, :L].transpose(1, 2)
        x = F.silu(x)
        y = self.ssm(x)
        return self.out_proj(y * F.silu(z))

    def _params(self, x):
        A = -torch.exp(self.A_log.float())
        delta, B, C = torch.split(self.x_proj(x), [DT_RANK, D_STATE, D_STATE], dim=-1)
        delta = (self.dt_proj.weight @ delta.transpose(-2, -1)).transpose(-2, -1)
        delta = F.softplus(delta + self.dt_proj.bias)
        return A, delta, B, C

    def ssm(self, x):
        A, delta, B, C = self._params(x)
        deltaA = torch.exp(delta.unsqueeze(-1) * A)  # (B, L, ED, N)
        deltaB = delta.unsqueeze(-1) * B.unsqueeze(2)
        BX = deltaB * x.unsqueeze(-1)
        hs = pscan(deltaA, BX)
        y = (hs @ C.unsqueeze(-1)).squeeze(3)
        return y + self.D * x

    def step(self, x, cache):
        # x: (B, D_MODEL); cache: (h (B, ED, N), inputs (B, ED, D_CONV - 1))
        h, inputs = cache
        x, z = self.in_proj(x).chunk(2, dim=1)
        x_cache = x.unsqueeze(2)
        x = self.conv1d(torch.cat([inputs, x_cache], dim=2))[:, :, D_CONV - 1]
        x = F.silu(x)
        A, delta, B, C = self._params(x)
        deltaA = torch.exp(delta.unsqueeze(-1) * A)
        BX = delta.unsqueeze(-1) * B.unsqueeze(1) * x.unsqueeze(-1)
        h = deltaA * h + BX
        y = (h @ C.unsqueeze(-1)).squeeze(2) + self.D * x
        out = self.out_proj(y * F.silu(z))
        inputs = torch.cat([inputs[:, :, 1:], x_cache], dim=2)
        return out, (h, inputs)


class Mamba(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D_MODEL)
        self.norms = nn.ModuleList(RMSNorm(D_MODEL) for _ in range(LAYERS))
        self.mixers = nn.ModuleList(MambaBlock() for _ in range(LAYERS))
        self.norm_f = RMSNorm(D_MODEL)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for norm, mixer in zip(self.norms, self.mixers, strict=True):
            x = mixer(norm(x)) + x
        return F.linear(self.norm_f(x), self.embedding.weight)

    def step(self, token, caches):
        x = self.embedding(token)
        new = []
        for norm, mixer, cache in zip(self.norms, self.mixers, caches, strict=True):
            out, cache = mixer.step(norm(x), cache)
            x = out + x
            new.append(cache)
        return F.linear(self.norm_f(x), self.embedding.weight), new


model = Mamba().to(dev)
decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "A_log" not in n]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2 or "A_log" in n]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}], lr=3e-4
)
report("setup")

B, T = 4, 1024
for step in range(4):
    tokens = torch.randint(0, VOCAB, (B, T + 1), device=dev)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
report("train")

model.eval()
with torch.no_grad():
    tokens = torch.randint(0, VOCAB, (4, 1536 + 1), device=dev)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    print(f"eval loss {loss.item():.4f}")
    del logits
report("eval")

del opt
with torch.inference_mode():
    Bd = 8
    prompt = torch.randint(0, VOCAB, (Bd, 64), device=dev)
    caches = [
        (torch.zeros(Bd, ED, D_STATE, device=dev), torch.zeros(Bd, ED, D_CONV - 1, device=dev))
        for _ in range(LAYERS)
    ]
    for t in range(prompt.size(1)):
        logits, caches = model.step(prompt[:, t], caches)
    out = [prompt]
    for _ in range(32):
        nxt = logits.argmax(dim=-1)
        out.append(nxt[:, None])
        logits, caches = model.step(nxt, caches)
    out = torch.cat(out, dim=1)
    print("decoded", tuple(out.shape), int(out[:, -1].sum()))
report("decode")
print("done")
