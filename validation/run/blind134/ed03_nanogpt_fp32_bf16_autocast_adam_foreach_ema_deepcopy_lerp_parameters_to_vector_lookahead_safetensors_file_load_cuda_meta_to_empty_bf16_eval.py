"""A nanoGPT-style decoder written by hand (768 wide, 12 layers, 12 heads, 1,024 context, 50,304
tokens, tied embedding; fp32 weights under bf16 autocast, SDPA causal) trained with Adam (foreach)
and kept with an EMA copy made by `copy.deepcopy` of the GPU model and updated by `_foreach_lerp_`;
a Lookahead-style slow copy kept as one flat vector by `parameters_to_vector`, after 2 fast steps
the fast weights pulled halfway to it and written back by `vector_to_parameters`; then the EMA
saved by `safetensors.torch.save_file` (the tied head dropped), read back by `load_file(device="cuda")`
into a model built under torch.device("meta") and materialised by `to_empty(device="cuda")`,
retied, turned to bf16 by `.to(torch.bfloat16)`, and evaluated under inference_mode at batch 16;
5 phases."""

import copy
import math
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.nn.utils import parameters_to_vector, vector_to_parameters

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13403)
V, D, L, H, T = (512, 64, 2, 4, 64) if SMALL else (50304, 768, 12, 12, 1024)
B = 2 if SMALL else 12
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

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT().to(device)
for n, p in model.named_parameters():
    if n.endswith("out.weight") or n.endswith("proj.weight"):
        nn.init.normal_(p, std=0.02 / math.sqrt(2 * L))
ema = copy.deepcopy(model).requires_grad_(False)
slow = parameters_to_vector(model.parameters()).detach().clone()
opt = torch.optim.Adam(model.parameters(), lr=6e-4, betas=(0.9, 0.95), foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(model, ema, opt):
    x = torch.randint(0, V, (B, T + 1), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V), x[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 0.001)
    return loss


for _ in range(2):
    loss = train_step(model, ema, opt)
if device == "cuda":
    print(
        f"fast loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    fast = parameters_to_vector(model.parameters())
    slow.add_(fast - slow, alpha=0.5)
    vector_to_parameters(slow, model.parameters())
    del fast
loss = train_step(model, ema, opt)
if device == "cuda":
    print(
        f"lookahead loss {loss.item():.4f} allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "ema.safetensors")
save_file({k: v for k, v in ema.state_dict().items() if k != "head.weight"}, path)
del ema, opt, slow, loss
with torch.device("meta"):
    final = GPT()
final = final.to_empty(device=device)
final.load_state_dict(load_file(path, device=device), strict=False)
final.head.weight = final.wte.weight
os.remove(path)
final = final.to(torch.bfloat16).eval()
if device == "cuda":
    print(
        f"ema restored allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    x = torch.randint(0, V, (16, T + 1), device=device)
    val = F.cross_entropy(final(x[:, :-1]).float().view(-1, V), x[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"ema eval {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
