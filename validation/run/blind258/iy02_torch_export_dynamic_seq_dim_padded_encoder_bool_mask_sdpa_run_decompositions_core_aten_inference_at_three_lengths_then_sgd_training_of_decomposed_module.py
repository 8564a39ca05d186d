"""`torch.export` with a dynamic sequence length and `run_decompositions`: an 8-layer pre-norm
Transformer encoder (d 1,024, 16 heads, MLP 4,096 with SiLU gating, bf16 weights) over padded batches,
its key-padding mask a boolean (B, 1, 1, T) `attn_mask` given to SDPA, exported with
`Dim("seq", min=32, max=1024)` on the token axis (batch fixed at 16), then decomposed to the core ATen
opset (`ep.run_decompositions()`: SDPA becomes the fused attention op the GPU picks for the masked
inputs). The decomposed module runs under no_grad at lengths 128, 512 and 1,024, then trains two SGD
steps (momentum 0.9) at length 256 through the same decomposed module.

Masks are built from fixed lengths: no value read back from the GPU decides a size. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2582)
D, H, L, B, VOCAB = 1024, 16, 8, 16, 8192


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.gate_up = nn.Linear(D, 2 * 4096, bias=False)
        self.down = nn.Linear(4096, D, bias=False)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, D))
        g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(g) * u)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(Layer() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.cls = nn.Linear(D, 4)

    def forward(self, ids, keep):
        mask = keep[:, None, None, :]
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, mask)
        x = self.norm(x)
        pooled = (x * keep[..., None].to(x.dtype)).sum(1) / keep.sum(1, keepdim=True).to(x.dtype)
        return self.cls(pooled)


def batch(t):
    ids = torch.randint(0, VOCAB, (B, t), device="cuda")
    lengths = torch.tensor([t - (i * t) // (2 * B) for i in range(B)], device="cuda")
    keep = torch.arange(t, device="cuda")[None, :] < lengths[:, None]
    return ids, keep


model = Encoder().cuda().to(torch.bfloat16)
seq = torch.export.Dim("seq", min=32, max=1024)
ids, keep = batch(256)
ep = torch.export.export(model, (ids, keep), dynamic_shapes={"ids": {1: seq}, "keep": {1: seq}})
ep = ep.run_decompositions()
report("export_dynamic_seq_run_decompositions")

gm = ep.module()
with torch.no_grad():
    for t in (128, 512, 1024):
        out = gm(*batch(t))
del out
report("decomposed_inference_three_lengths")

opt = torch.optim.SGD(gm.parameters(), lr=1e-3, momentum=0.9)
for _ in range(2):
    ids, keep = batch(256)
    labels = torch.randint(0, 4, (B,), device="cuda")
    loss = F.cross_entropy(gm(ids, keep).float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
del loss
report("sgd_training_decomposed_seq256")

with torch.no_grad():
    out = gm(*batch(1024))
del out
report("after_training_inference_seq1024")
