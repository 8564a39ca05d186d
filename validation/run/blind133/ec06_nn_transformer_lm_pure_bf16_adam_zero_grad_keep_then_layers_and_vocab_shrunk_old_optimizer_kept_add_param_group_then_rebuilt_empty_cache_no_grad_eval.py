"""Memory mistakes around shrinking a model in the middle of training: a causal language model of
torch.nn's own layers (TransformerEncoder of 12 pre-norm TransformerEncoderLayers, width 1,024, 16
heads, GELU, batch_first, SDPA through is_causal; 64,000-token embedding and untied head), cast to
pure bf16, Adam (foreach) with `zero_grad(set_to_none=False)`, batch 8 of 512 tokens, 2 steps; then
the model shrunk the way one prunes it by hand: the top 6 layers dropped by slicing the ModuleList
and the vocabulary trimmed to 16,000 by new embedding and head modules, while the old optimizer is
kept and the new modules added with `add_param_group`, so the dropped layers, the old embedding and
head, their zeroed gradients and their Adam moments all stay alive (and are stepped with zero
gradients), 2 steps; then the fix: the old optimizer deleted, the gradients set to None,
`gc.collect()` and `torch.cuda.empty_cache()`, a new Adam over the model's parameters and
`zero_grad()` (set_to_none), 2 steps; then a no_grad evaluation at batch 16; 4 phases."""

import gc
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13306)
B, T, D, L, H, V, V2 = (2, 32, 64, 4, 2, 1000, 300) if SMALL else (8, 512, 1024, 12, 16, 64000, 16000)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        layer = nn.TransformerEncoderLayer(
            D, H, 4 * D, dropout=0.1, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos[: idx.shape[1]]
        mask = torch.triu(torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool, device=idx.device), 1)
        x = self.encoder(x, mask=mask, is_causal=True)
        return self.head(self.norm(x))


model = LM().to(device, dtype)
opt = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.98), eps=1e-6)
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


def step(optimizer, vocab, keep_grads):
    idx = torch.randint(0, vocab, (B, T + 1), device=device)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.view(-1, vocab), idx[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=not keep_grads)
    return loss.item()


model.train()
losses = [step(opt, V, True) for _ in range(2)]
report(f"full model loss {losses[-1]:.3f}")

# the mistake: shrink the model, keep the old optimizer
model.encoder.layers = model.encoder.layers[: L // 2]
model.encoder.num_layers = L // 2
model.emb = nn.Embedding(V2, D).to(device, dtype)
model.head = nn.Linear(D, V2, bias=False).to(device, dtype)
opt.add_param_group({"params": list(model.emb.parameters()) + list(model.head.parameters())})
losses = [step(opt, V2, True) for _ in range(2)]
held = sum(p.numel() for g in opt.param_groups for p in g["params"])
report(f"shrunk, old optimizer loss {losses[-1]:.3f} optimizer params {held}")

# the fix
del opt
model.zero_grad(set_to_none=True)
gc.collect()
torch.cuda.empty_cache()
opt = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.98), eps=1e-6)
losses = [step(opt, V2, False) for _ in range(2)]
report(f"shrunk, new optimizer loss {losses[-1]:.3f}")

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V2, (2 * B, T + 1), device=device)
    logits = model(idx[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, V2), idx[:, 1:].reshape(-1))
report(f"eval loss {loss.item():.3f}")
