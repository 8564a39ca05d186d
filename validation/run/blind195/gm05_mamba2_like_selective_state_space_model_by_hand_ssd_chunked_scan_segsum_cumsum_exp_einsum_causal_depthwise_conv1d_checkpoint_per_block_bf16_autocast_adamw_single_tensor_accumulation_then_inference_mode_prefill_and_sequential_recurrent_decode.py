"""A Mamba-2-like selective state-space language model written by hand, with the chunked "state space
duality" scan of the reference ssd_minimal (segment sums by cumsum, exp decays, einsum contractions) for
training and prefill, and the sequential per-token recurrence for decoding.

Model: vocabulary 50,280, width 768, 12 residual blocks (RMSNorm by hand, then the mixer), tied output
embedding. Mixer: in_proj 768 -> z (1,536), x (1,536), B (64), C (64), dt (24 heads); a causal depthwise
nn.Conv1d (kernel 4, padding 3, cropped) over x|B|C with SiLU; dt = softplus(dt + dt_bias), A = -exp(A_log)
per head; y = SSD(x * dt, A * dt, B, C) over chunks of 256 + D * x; a gated RMSNorm (y * silu(z)) and
out_proj 1,536 -> 768. Training at 2 x 8,192 tokens under bf16 autocast (fp32 weights), each block under
torch.utils.checkpoint (use_reentrant=False); AdamW with foreach=False (lr 6e-4, weight decay 0.1 except
A_log, D, dt_bias, norms and embeddings), clip_grad_norm_ 1.0.

Phases: the first step; 3 steps of 2 accumulated micro-batches; under torch.inference_mode a prefill of
2 x 4,096 tokens through the chunked scan returning each layer's final SSM state and convolution state,
then 48 greedy tokens decoded one at a time with the recurrence h = exp(dt A) h + dt B x, y = C h + D x
(convolution state rolled by hand); then training without checkpointing at 4 x 2,048. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19505)
if SMALL:
    VOCAB, D, LAYERS, HEADDIM, N_STATE, CHUNK = 256, 64, 2, 16, 8, 32
    B, SEQ, STEPS, ACCUM, PRE_B, PRE_SEQ, NEW, NC_B, NC_SEQ = 1, 128, 1, 2, 1, 64, 4, 2, 64
else:
    VOCAB, D, LAYERS, HEADDIM, N_STATE, CHUNK = 50280, 768, 12, 64, 64, 256
    B, SEQ, STEPS, ACCUM, PRE_B, PRE_SEQ, NEW, NC_B, NC_SEQ = 2, 8192, 3, 2, 2, 4096, 48, 4, 2048
D_INNER = 2 * D
N_HEADS = D_INNER // HEADDIM
CONV_DIM = D_INNER + 2 * N_STATE
KERNEL = 4
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def segsum(x):
    """Stable segment sum: out[..., i, j] = x[..., j+1] + ... + x[..., i] for j <= i, -inf above."""
    T = x.size(-1)
    x = x[..., None].expand(*x.shape, T)
    mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool), diagonal=-1)
    x = x.masked_fill(~mask, 0)
    x_segsum = torch.cumsum(x, dim=-2)
    mask = torch.tril(torch.ones(T, T, device=x.device, dtype=torch.bool), diagonal=0)
    return x_segsum.masked_fill(~mask, -torch.inf)


def ssd(X, A, Bm, Cm, initial_states=None):
    """X (b, t, h, p), A (b, t, h), Bm/Cm (b, t, n); returns Y (b, t, h, p), final state (b, h, p, n)."""
    b, t, h, p = X.shape
    c = t // CHUNK
    X = X.reshape(b, c, CHUNK, h, p)
    Bm = Bm.reshape(b, c, CHUNK, -1)
    Cm = Cm.reshape(b, c, CHUNK, -1)
    A = A.reshape(b, c, CHUNK, h).permute(0, 3, 1, 2)
    A_cumsum = torch.cumsum(A, dim=-1)
    L = torch.exp(segsum(A))
    Y_diag = torch.einsum("bcln,bcsn,bhcls,bcshp->bclhp", Cm, Bm, L, X)
    decay_states = torch.exp(A_cumsum[:, :, :, -1:] - A_cumsum)
    states = torch.einsum("bcln,bhcl,bclhp->bchpn", Bm, decay_states, X)
    if initial_states is None:
        initial_states = torch.zeros_like(states[:, :1])
    states = torch.cat([initial_states, states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(A_cumsum[:, :, :, -1], (1, 0))))
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states, final_state = new_states[:, :-1], new_states[:, -1]
    state_decay_out = torch.exp(A_cumsum)
    Y_off = torch.einsum("bcln,bchpn,bhcl->bclhp", Cm, states, state_decay_out)
    return (Y_diag + Y_off).reshape(b, t, h, p), final_state


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x, z=None):
        if z is not None:
            x = x * F.silu(z)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba2Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(D, 2 * D_INNER + 2 * N_STATE + N_HEADS, bias=False)
        self.conv1d = nn.Conv1d(CONV_DIM, CONV_DIM, KERNEL, groups=CONV_DIM, padding=KERNEL - 1)
        dt = torch.exp(
            torch.rand(N_HEADS) * (torch.log(torch.tensor(0.1)) - torch.log(torch.tensor(0.001)))
            + torch.log(torch.tensor(0.001))
        )
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(N_HEADS).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(N_HEADS))
        self.norm = RMSNorm(D_INNER)
        self.out_proj = nn.Linear(D_INNER, D, bias=False)

    def split(self, zxbcdt):
        return torch.split(zxbcdt, [D_INNER, CONV_DIM, N_HEADS], dim=-1)

    def forward(self, u, return_state=False):
        b, t, _ = u.shape
        z, xBC, dt = self.split(self.in_proj(u))
        conv_state = F.pad(xBC.transpose(1, 2), (KERNEL - t, 0)) if return_state else None
        xBC = F.silu(self.conv1d(xBC.transpose(1, 2))[..., :t].transpose(1, 2))
        x, Bm, Cm = torch.split(xBC, [D_INNER, N_STATE, N_STATE], dim=-1)
        dt = F.softplus(dt + self.dt_bias)
        A = -torch.exp(self.A_log.float())
        x = x.reshape(b, t, N_HEADS, HEADDIM)
        y, ssm_state = ssd(x * dt[..., None], A * dt, Bm, Cm)
        y = y + x * self.D[:, None]
        y = self.norm(y.reshape(b, t, D_INNER), z)
        out = self.out_proj(y)
        return (out, (conv_state, ssm_state)) if return_state else out

    def step(self, u, state):
        conv_state, ssm_state = state
        z, xBC, dt = self.split(self.in_proj(u))
        conv_state.copy_(torch.roll(conv_state, shifts=-1, dims=-1))
        conv_state[:, :, -1] = xBC
        xBC = torch.sum(conv_state * self.conv1d.weight[:, 0], dim=-1) + self.conv1d.bias
        xBC = F.silu(xBC)
        x, Bm, Cm = torch.split(xBC, [D_INNER, N_STATE, N_STATE], dim=-1)
        A = -torch.exp(self.A_log.float())
        dt = F.softplus(dt + self.dt_bias)
        dA = torch.exp(dt * A)
        x = x.reshape(-1, N_HEADS, HEADDIM)
        dBx = torch.einsum("bh,bn,bhp->bhpn", dt, Bm, x)
        ssm_state.copy_(ssm_state * dA[:, :, None, None] + dBx)
        y = torch.einsum("bhpn,bn->bhp", ssm_state.to(x.dtype), Cm)
        y = y + self.D[:, None] * x
        y = self.norm(y.reshape(-1, D_INNER), z)
        return self.out_proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(D)
        self.mixer = Mamba2Mixer()

    def forward(self, x):
        return x + self.mixer(self.norm(x))


class MambaLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm_f = RMSNorm(D)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.use_checkpoint = True

    def forward(self, ids):
        x = self.embedding(ids)
        for layer in self.layers:
            x = (
                checkpoint(layer, x, use_reentrant=False)
                if self.use_checkpoint and self.training
                else layer(x)
            )
        return F.linear(self.norm_f(x), self.embedding.weight)

    @torch.inference_mode()
    def generate(self, ids, n_new):
        x = self.embedding(ids)
        states = []
        for layer in self.layers:
            out, st = layer.mixer(layer.norm(x), return_state=True)
            x = x + out
            states.append(st)
        logits = F.linear(self.norm_f(x[:, -1]), self.embedding.weight)
        tokens = [logits.argmax(-1)]
        for _ in range(n_new - 1):
            x = self.embedding(tokens[-1])
            for layer, st in zip(self.layers, states, strict=True):
                x = x + layer.mixer.step(layer.norm(x), st)
            tokens.append(F.linear(self.norm_f(x), self.embedding.weight).argmax(-1))
        return torch.stack(tokens, 1)


model = MambaLM().to(device)
no_decay_names = ("A_log", "D", "dt_bias", "norm", "embedding")
decay = [
    p
    for n, p in model.named_parameters()
    if not any(k in n.split(".")[-2:] or k in n for k in no_decay_names)
]
no_decay = [
    p for n, p in model.named_parameters() if any(k in n.split(".")[-2:] or k in n for k in no_decay_names)
]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    foreach=False,
)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M, {len(decay)} decayed tensors")


def micro_batch(b, seq, scale):
    ids = torch.randint(0, VOCAB, (b, seq + 1), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.view(-1, VOCAB).float(), ids[:, 1:].reshape(-1))
    (loss / scale).backward()
    return loss.item()


def step(b, seq, accum):
    losses = [micro_batch(b, seq, accum) for _ in range(accum)]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return sum(losses) / accum


model.train()
print(f"step 0 loss {step(B, SEQ, 1):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for _ in range(STEPS):
    loss = step(B, SEQ, ACCUM)
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
prompt = torch.randint(0, VOCAB, (PRE_B, PRE_SEQ), device=device)
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    out = model.generate(prompt, NEW)
print(f"generated {tuple(out.shape)} first ids {out[0, :4].tolist()}")
if device == "cuda":
    print(f"generate peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
model.use_checkpoint = False
for _ in range(2):
    loss = step(NC_B, NC_SEQ, 1)
print(f"no-checkpoint loss {loss:.4f}")
if device == "cuda":
    print(
        f"no-checkpoint allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
