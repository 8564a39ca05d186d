"""LoRA written by hand with torch.nn.utils.parametrize, as tutorials on parametrizations show it: a
GPT-style decoder (12 layers, d_model 1,024, 16 heads, MLP 4,096, vocabulary 32,000, sequence 512,
causal F.scaled_dot_product_attention) cast to bf16 and frozen; a LoRA parametrization (rank 16,
alpha 32, fp32 factors A and B, B zero-initialized) registered with register_parametrization on the
weight of every query, key, value, output and MLP projection, returning W + (B @ A * scale) cast to
W's dtype, so each access builds the whole adapted weight; AdamW over the LoRA factors only, batch
24; 3 steps; then a perplexity evaluation of 4 batches under no_grad inside parametrize.cached();
then the adapters merged with remove_parametrizations(leave_parametrized=True) and the evaluation
repeated on the merged model; 6 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15102)
LAYERS, D, H, FF, V, T, B, RANK, STEPS, EVAL = (
    (2, 64, 4, 128, 100, 16, 2, 4, 2, 2) if SMALL else (12, 1024, 16, 4096, 32000, 512, 24, 16, 3, 4)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class LoRA(nn.Module):
    def __init__(self, fan_out, fan_in, rank, alpha):
        super().__init__()
        self.A = nn.Parameter(torch.empty(rank, fan_in))
        self.B = nn.Parameter(torch.zeros(fan_out, rank))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, W):
        return W + (self.B @ self.A * self.scale).to(W.dtype)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(D, D, bias=False)
        self.v = nn.Linear(D, D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.ln2 = nn.LayerNorm(D)
        self.up = nn.Linear(D, FF, bias=False)
        self.down = nn.Linear(FF, D, bias=False)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.ln1(x)
        q, k, v = (m(h).view(b, t, H, D // H).transpose(1, 2) for m in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT().to(device=device, dtype=torch.bfloat16)
model.requires_grad_(False)
targets = [m for blk in model.blocks for m in (blk.q, blk.k, blk.v, blk.o, blk.up, blk.down)]
for lin in targets:
    out_f, in_f = lin.weight.shape
    parametrize.register_parametrization(lin, "weight", LoRA(out_f, in_f, RANK, 2 * RANK).to(device))
lora_params = [p for n, p in model.named_parameters() if p.requires_grad]
opt = torch.optim.AdamW(lora_params, lr=2e-4, weight_decay=0.0)
if device == "cuda":
    print(
        f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        f" lora params {sum(p.numel() for p in lora_params)}"
    )
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    ids = torch.randint(0, V, (n, T + 1), device=device)
    return ids[:, :-1], ids[:, 1:]


model.train()
for step in range(STEPS):
    x, y = batch(B)
    logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
del logits, loss, x, y


def evaluate(tag, reset=True):
    total = 0.0
    with torch.no_grad():
        for _ in range(EVAL):
            x, y = batch(B)
            logits = model(x)
            total += F.cross_entropy(logits.float().view(-1, V), y.reshape(-1)).item()
    if device == "cuda":
        print(
            f"{tag} ppl {math.exp(total / EVAL):.1f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        if reset:
            torch.cuda.reset_peak_memory_stats()


model.eval()
with parametrize.cached():
    evaluate("cached eval")
for lin in targets:
    parametrize.remove_parametrizations(lin, "weight", leave_parametrized=True)
del opt, lora_params
if device == "cuda":
    print(f"merged {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
evaluate("merged eval", reset=False)
