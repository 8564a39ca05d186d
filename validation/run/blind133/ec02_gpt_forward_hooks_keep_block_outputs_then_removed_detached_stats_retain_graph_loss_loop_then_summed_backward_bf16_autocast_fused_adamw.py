"""Memory mistakes around a hand-written GPT (12 blocks of 768, 12 heads, SDPA causal attention,
GELU MLP, tied 50,304-token embedding; fp32 weights under bf16 autocast, fused AdamW), batch 8 of
1,024 tokens: one plain step; then forward hooks registered on every block and on the final norm that
keep each output tensor in a dict (`acts[name] = out`) for later inspection, so the bf16 block
outputs stay alive after backward and the step, one step and their norms printed; then the hooks
removed, the dict cleared and a hook that keeps only the detached mean square of each output, one
step; then three losses (the next-token loss over each half of the sequence and a z-loss on the
logits) backpropagated one by one with `retain_graph=True` in a loop, the graph released only when
the loss list is dropped; then the fix, the sum of the three losses backpropagated once; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13302)
B, T, D, L, H, V = (2, 64, 64, 2, 2, 512) if SMALL else (8, 1024, 768, 12, 12, 50304)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if name.endswith("out.weight") or name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def report(tag):
    if device == "cuda":
        print(
            f"{tag} allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch():
    idx = torch.randint(0, V, (B, T + 1), device=device)
    return idx[:, :-1], idx[:, 1:]


def step():
    x, y = batch()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


report(f"plain step loss {step():.3f}")

# the mistake: hooks that keep the outputs themselves
acts = {}


def keep(name):
    def hook(module, args, out):
        acts[name] = out

    return hook


handles = [blk.register_forward_hook(keep(f"block{i}")) for i, blk in enumerate(model.blocks)]
handles.append(model.ln_f.register_forward_hook(keep("ln_f")))
loss = step()
norms = {k: v.float().norm().item() for k, v in acts.items()}
report(f"hooks keeping outputs loss {loss:.3f} kept {len(acts)} last norm {norms['ln_f']:.1f}")

# the fix: remove them, keep only detached statistics
for h in handles:
    h.remove()
acts.clear()
stats = {}


def keep_stat(name):
    def hook(module, args, out):
        stats[name] = out.detach().float().pow(2).mean()

    return hook


handles = [blk.register_forward_hook(keep_stat(f"block{i}")) for i, blk in enumerate(model.blocks)]
loss = step()
rms = torch.stack(list(stats.values())).sqrt().tolist()
for h in handles:
    h.remove()
report(f"hooks keeping stats loss {loss:.3f} rms {rms[-1]:.3f}")

# the mistake: retain_graph=True in a loop over losses
x, y = batch()
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    logits = model(x)
logits = logits.float()
half = T // 2
losses = [
    F.cross_entropy(logits[:, :half].reshape(-1, V), y[:, :half].reshape(-1)),
    F.cross_entropy(logits[:, half:].reshape(-1, V), y[:, half:].reshape(-1)),
    1e-4 * torch.logsumexp(logits, dim=-1).pow(2).mean(),
]
for loss in losses:
    loss.backward(retain_graph=True)
opt.step()
opt.zero_grad(set_to_none=True)
total = sum(v.item() for v in losses)
del losses, loss, logits
report(f"retain_graph loop total {total:.3f}")

# the fix: one backward of the sum
x, y = batch()
with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    logits = model(x)
logits = logits.float()
loss = (
    F.cross_entropy(logits[:, :half].reshape(-1, V), y[:, :half].reshape(-1))
    + F.cross_entropy(logits[:, half:].reshape(-1, V), y[:, half:].reshape(-1))
    + 1e-4 * torch.logsumexp(logits, dim=-1).pow(2).mean()
)
del logits
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
report(f"summed backward total {loss.item():.3f}")
