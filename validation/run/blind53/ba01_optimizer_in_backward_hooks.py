"""The optimizer fused into the backward pass, as PyTorch's tutorial does it: one Adam per parameter
stepped from `register_post_accumulate_grad_hook` and its gradient dropped at once, so no full set of
gradients ever exists; a 12-layer causal transformer (width 1024, nn.TransformerEncoderLayer,
norm_first) over batch 8 x 1024 tokens, vocabulary 32,000, fp32, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(5301)
B, T, D, L, V = (2, 16, 64, 2, 100) if SMALL else (8, 1024, 1024, 12, 32000)
device = "cuda" if torch.cuda.is_available() else "cpu"


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(T, D))
        layer = nn.TransformerEncoderLayer(D, 16, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        h = self.embed(idx) + self.pos
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device)
        return self.head(self.blocks(h, mask=mask, is_causal=True))


model = LM().to(device)
optimizers = {p: torch.optim.Adam([p], lr=1e-4, foreach=False) for p in model.parameters()}


def step_now(p):
    optimizers[p].step()
    optimizers[p].zero_grad(set_to_none=True)


for p in model.parameters():
    p.register_post_accumulate_grad_hook(step_now)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    idx = torch.randint(0, V, (B, T), device=device)
    loss = F.cross_entropy(model(idx).flatten(0, 1), idx.roll(-1, 1).flatten())
    loss.backward()
    del idx, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
