"""Post-training low-rank compression of a GPT's MLPs with `torch.nn.utils.parametrize`, the way the
parametrization tutorial's "initialising through right_inverse" section suggests: the dense weight is
replaced by two factors computed by a truncated SVD inside `right_inverse`, fine-tuned as factors, moved
to a fresh model and baked back into plain weights for serving.

A hand-written GPT (12 layers, width 768, 12 heads, SDPA causal, GELU MLP 4x, vocabulary 32,000, context
512). Phases: (1) dense training: 6 AdamW steps at batch 16 x 512 under bf16 autocast; (2) compression:
`register_parametrization(mlp.fc / mlp.proj, "weight", LowRank(rank 192), unsafe=True)` whose
`right_inverse` returns a (U sqrt(S), sqrt(S) V^T) pair from `torch.linalg.svd` of the trained weight, so
the module holds `parametrizations.weight.original0/original1` instead of the 768 x 3,072 matrices; the
relative reconstruction error per layer printed; (3) fine-tuning the compressed model: a new AdamW over
all parameters (factors included), 8 steps, the parametrized weights recomputed in every forward; (4)
hand-off: a fresh GPT built on the device, the 24 parametrizations copied over with
`parametrize.transfer_parametrizations_and_params`, the rest by `load_state_dict(strict=False)`, the old
model and its optimizer deleted; (5) serving: `parametrize.remove_parametrizations(...,
leave_parametrized=True)` on half of the layers (the rest evaluated under `parametrize.cached()`), then
`inference_mode` scoring of 32 x 512 in fp16 after `.half()`."""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

torch.manual_seed(30105)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, CTX, WIDTH, HEADS, LAYERS, RANK, B = 32000, 512, 768, 12, 12, 192, 16


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(att.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.proj(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, WIDTH)
        self.pos = nn.Embedding(CTX, WIDTH)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.tok.weight
        nn.init.normal_(self.tok.weight, std=0.02)
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class LowRank(nn.Module):
    """weight = A @ B with A (out, r), B (r, in); right_inverse factors a dense weight by a truncated SVD."""

    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def forward(self, a, b):
        return a @ b

    def right_inverse(self, weight):
        u, s, vh = torch.linalg.svd(weight.float(), full_matrices=False)
        root = s[: self.rank].sqrt()
        return (u[:, : self.rank] * root).to(weight.dtype), (root[:, None] * vh[: self.rank]).to(weight.dtype)


def batches(n, batch, gen):
    for _ in range(n):
        yield torch.randint(0, VOCAB, (batch, CTX + 1), device=device, generator=gen)


def train(model, opt, steps, gen):
    for seq in batches(steps, B, gen):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(seq[:, :-1])
            loss = F.cross_entropy(logits.view(-1, VOCAB).float(), seq[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return loss.item()


gen = torch.Generator(device=device).manual_seed(1)

# phase 1: dense training
model = GPT().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
print(f"dense loss {train(model, opt, 6, gen):.4f}")
report("phase 1 dense training")

# phase 2: low-rank parametrizations initialised through right_inverse
del opt
errors = []
for block in model.blocks:
    for linear in (block.fc, block.proj):
        dense = linear.weight.detach().clone()
        parametrize.register_parametrization(linear, "weight", LowRank(RANK), unsafe=True)
        errors.append(
            torch.linalg.matrix_norm(linear.weight.detach() - dense) / torch.linalg.matrix_norm(dense)
        )
        del dense
n_params = sum(p.numel() for p in model.parameters())
print(f"reconstruction error max {torch.stack(errors).max().item():.3f} params {n_params}")
report("phase 2 low-rank compression")

# phase 3: fine-tune the factors with everything else
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
print(f"compressed loss {train(model, opt, 8, gen):.4f}")
report("phase 3 compressed fine-tuning")

# phase 4: hand the parametrizations to a fresh model
fresh = GPT().to(device)
for old_block, new_block in zip(model.blocks, fresh.blocks, strict=True):
    for name in ("fc", "proj"):
        parametrize.transfer_parametrizations_and_params(getattr(old_block, name), getattr(new_block, name))
rest = {k: v for k, v in model.state_dict().items() if "parametrizations" not in k}
missing, unexpected = fresh.load_state_dict(rest, strict=False)
del model, opt, rest
print(f"transferred: missing {len(missing)} unexpected {len(unexpected)}")
report("phase 4 transfer parametrizations")

# phase 5: bake half the layers, serve the rest with cached parametrizations
for block in fresh.blocks[: LAYERS // 2]:
    for linear in (block.fc, block.proj):
        parametrize.remove_parametrizations(linear, "weight", leave_parametrized=True)
fresh = fresh.half().eval()
nll = 0.0
with torch.inference_mode(), parametrize.cached():
    for seq in batches(4, 2 * B, gen):
        logits = fresh(seq[:, :-1])
        nll += F.cross_entropy(logits.view(-1, VOCAB).float(), seq[:, 1:].reshape(-1)).item()
print(f"served ppl {math.exp(nll / 4):.1f}")
report("phase 5 baked and cached serving")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
