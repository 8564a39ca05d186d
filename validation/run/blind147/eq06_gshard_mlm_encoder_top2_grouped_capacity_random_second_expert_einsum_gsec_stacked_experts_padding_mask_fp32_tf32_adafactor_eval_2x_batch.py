"""A masked-LM Transformer encoder with GShard MoE layers (Lepikhin et al. 2020, the Top2Gating of
Lingvo's gshard layers written in PyTorch): 6 post-norm layers 1,024 wide, every other FFN a layer of
32 experts of width 4,096 over stacked weights; tokens split into groups of 1,024 with the capacity
2 * S / E per group and expert, top-2 gating with the second expert kept at random with probability
2 * g2, positions by cumsum over the group (the second choices after all first ones), the combine
tensor (G, S, E, C) from one_hot products, the dispatch its bool, einsum "gsec,gsm->egcm" into the
experts and "gsec,egcm->gsm" back, the aux loss mean(density * density_proxy) * E^2; BERT-style 15%
masking with -100 labels, boolean key-padding masks for SDPA over random lengths; fp32 with TF32
matmuls, torch.optim.Adafactor, batch 16 x 512, 3 steps; then a no_grad masked-LM evaluation at
batch 32 with a doubled capacity; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14706)
torch.backends.cuda.matmul.allow_tf32 = True
VOCAB, D, FF, E, LAYERS, HEADS, B, T, GROUP, EB = (
    (300, 32, 64, 4, 2, 2, 4, 16, 16, 8) if SMALL else (32000, 1024, 4096, 32, 6, 16, 16, 512, 1024, 32)
)
MASK_ID = 4
device = "cuda" if torch.cuda.is_available() else "cpu"


class GShardMoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.wg = nn.Linear(D, E, bias=False)
        self.wi = nn.Parameter(torch.randn(E, D, FF) * D**-0.5)
        self.wo = nn.Parameter(torch.randn(E, FF, D) * FF**-0.5)
        self.capacity_mult = 1.0

    def forward(self, x):
        b, t, d = x.shape
        g = (b * t) // GROUP
        xs = x.reshape(g, GROUP, d)
        cap = int(self.capacity_mult * 2 * GROUP / E)
        gates = self.wg(xs).softmax(-1)  # g, s, E
        index_1 = gates.argmax(-1)
        mask_1 = F.one_hot(index_1, E).to(gates.dtype)
        density_1 = mask_1.mean(1)
        density_proxy = gates.mean(1)
        aux = (density_1 * density_proxy).mean() * E * E
        gates_wo1 = gates * (1.0 - mask_1)
        index_2 = gates_wo1.argmax(-1)
        mask_2 = F.one_hot(index_2, E).to(gates.dtype)
        gate_1 = (gates * mask_1).sum(-1)
        gate_2 = (gates * mask_2).sum(-1)
        denom = gate_1 + gate_2 + 1e-9
        gate_1, gate_2 = gate_1 / denom, gate_2 / denom
        if self.training:
            keep_2 = (torch.rand_like(gate_2) < 2.0 * gate_2).to(gates.dtype)
            mask_2 = mask_2 * keep_2.unsqueeze(-1)
        pos_1 = (torch.cumsum(mask_1, dim=1) - 1.0) * mask_1
        mask_1 = mask_1 * (pos_1 < cap).to(gates.dtype)
        count_1 = mask_1.sum(1, keepdim=True)
        pos_2 = (torch.cumsum(mask_2, dim=1) - 1.0 + count_1) * mask_2
        mask_2 = mask_2 * (pos_2 < cap).to(gates.dtype)
        flat_1, flat_2 = mask_1.sum(-1), mask_2.sum(-1)
        pos_1, pos_2 = pos_1.sum(-1).long(), pos_2.sum(-1).long()
        combine = (
            (gate_1 * flat_1)[..., None, None]
            * F.one_hot(index_1, E)[..., None]
            * F.one_hot(pos_1.clamp(max=cap - 1), cap)[..., None, :]
        )
        combine = (
            combine
            + (gate_2 * flat_2)[..., None, None]
            * F.one_hot(index_2, E)[..., None]
            * F.one_hot(pos_2.clamp(max=cap - 1), cap)[..., None, :]
        )
        dispatch = combine.bool().to(x.dtype)
        expert_in = torch.einsum("gsec,gsm->egcm", dispatch, xs)
        h = F.relu(torch.einsum("egcm,emh->egch", expert_in, self.wi))
        expert_out = torch.einsum("egch,ehm->egcm", h, self.wo)
        y = torch.einsum("gsec,egcm->gsm", combine, expert_out)
        return y.reshape(b, t, d), aux


class Layer(nn.Module):
    def __init__(self, moe):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.ln1 = nn.LayerNorm(D)
        self.ln2 = nn.LayerNorm(D)
        self.moe = moe
        self.ffn = GShardMoE() if moe else nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D))

    def forward(self, x, keep):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, t, d)))
        if self.moe:
            y, aux = self.ffn(x)
        else:
            y, aux = self.ffn(x), 0.0
        return self.ln2(x + y), aux


class MoEEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.ln = nn.LayerNorm(D)
        self.layers = nn.ModuleList(Layer(moe=i % 2 == 1) for i in range(LAYERS))
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids, keep):
        x = self.ln(self.tok(ids) + self.pos.weight[: ids.shape[1]])
        aux = 0.0
        for layer in self.layers:
            x, a = layer(x, keep)
            aux = aux + a
        return self.head(x), aux


def batch(n):
    ids = torch.randint(5, VOCAB, (n, T), device=device)
    lengths = torch.randint(T // 2, T + 1, (n, 1), device=device)
    keep = torch.arange(T, device=device)[None, :] < lengths
    masked = (torch.rand(n, T, device=device) < 0.15) & keep
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    inputs = torch.where(masked, torch.full_like(ids, MASK_ID), ids)
    return inputs, labels, keep


model = MoEEncoder().to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
opt = torch.optim.Adafactor(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    inputs, labels, keep = batch(B)
    logits, aux = model(inputs, keep)
    mlm = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100)
    loss = mlm + 0.01 * aux
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device == "cuda":
        print(
            f"step {step} mlm {mlm.item():.3f} aux {float(aux):.3f} peak {torch.cuda.max_memory_allocated()}"
            f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, aux, mlm, loss

model.eval()
for layer in model.layers:
    if layer.moe:
        layer.ffn.capacity_mult = 2.0
with torch.no_grad():
    inputs, labels, keep = batch(EB)
    logits, _ = model(inputs, keep)
    nll = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100)
    acc = ((logits.argmax(-1) == labels).sum() / (labels != -100).sum()).item()
if device == "cuda":
    print(
        f"eval nll {nll.item():.3f} acc {acc:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
