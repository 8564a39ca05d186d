"""Recurrences written with PyTorch's control-flow operators: a 2-layer minGRU-style language model
(d 768, vocab 8000) whose hidden state runs through `torch._higher_order_ops.scan` over 256 time steps
(each step `h = (1 - z) * h + z * h_tilde` with gates from the input, and a d x d state mix), trained with
Adam (fp32, foreach) at batch 16; then a parallel prefix product of gates by `associative_scan`
(combine_mode="generic") with gradient; then inference under no_grad with `map` over 8 chunks of the
batch.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._higher_order_ops import associative_scan, scan
from torch._higher_order_ops import map as hop_map

torch.manual_seed(2412)
V, D, T, B, L = 8000, 768, 256, 16, 2


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class MinGRU(nn.Module):
    def __init__(self):
        super().__init__()
        self.gates = nn.Linear(D, 2 * D)
        self.mix = nn.Linear(D, D, bias=False)
        self.norm = nn.LayerNorm(D)

    def forward(self, x):
        z, h_tilde = self.gates(self.norm(x)).chunk(2, dim=-1)
        z = torch.sigmoid(z).transpose(0, 1).contiguous()
        h_tilde = h_tilde.transpose(0, 1).contiguous()
        w = self.mix.weight

        def step(h, inp):
            zt, ht = inp
            h = (1 - zt) * torch.tanh(h @ w) + zt * ht
            return h, h.clone()

        h0 = torch.zeros(x.shape[0], D, device=x.device, dtype=x.dtype)
        _, hs = scan(step, h0, (z, h_tilde))
        return x + hs.transpose(0, 1)


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(MinGRU() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


model = LM().cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
idx = torch.randint(0, V, (B, T), device="cuda")
tgt = torch.randint(0, V, (B, T), device="cuda")
report("setup")

for _ in range(2):
    loss = F.cross_entropy(model(idx).view(-1, V), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_scan_fp32_adam")

gates = torch.rand(T, B, D, device="cuda", requires_grad=True)
prefix = associative_scan(lambda a, b: a * b, gates, 0, combine_mode="generic")
prefix.sum().backward()
del prefix
report("associative_scan_prefix_products_backward")

model.eval()
with torch.no_grad():
    chunks = idx.view(8, B // 8, T)
    logits = hop_map(lambda c: model(c), chunks)
    del logits
report("map_over_chunks_no_grad")
