"""A transformer language model with a product-key memory layer (Lample et al. 2019, "Large Memory
Layers with Product Keys"), written the way lucidrains/product-key-memory writes it: queries
(4 heads x 2 halves x 256) from a Linear, a BatchNorm-free per-half LayerNorm, scores against two
sets of 512 sub-keys per head by `einsum('btphd,hnpd->btphn')`, `topk(32)` in each half, the 32 x 32
cartesian sums of the two halves' scores (`s1[..., :, None] + s2[..., None, :]`, indices
`i1 * 512 + i2`), a second `topk(32)` over those 1,024 candidates, `gather` of the value indices,
softmax weights, and the memory read as `nn.EmbeddingBag(512**2, 768, mode="sum")`
with `per_sample_weights` (262,144 values of 768, 805 MB in fp32; the dense gradient of
`embedding_bag`'s sorted backward, whose buffers are sized by the index count, not by how many
distinct rows were read). 8 pre-norm layers of d 768, 12 heads (SDPA causal), GELU MLPs, the FFN of
layers 3 and 6 replaced by the memory, vocabulary 32,000 (untied). bf16 autocast; AdamW with the
memory's values in their own group (learning rate 1e-2, no weight decay) as the repository's
`fetch_optimizer_parameters` does, the keys at 3e-3. Phase 1: 5 steps at batch 8 x 512. Phase 2:
no_grad evaluation at batch 16 x 512 (bf16 autocast) and the memory usage statistics (`torch.bincount`
of the read indices over 262,144 slots, fixed length via `minlength`). Fixed sizes. 2 phases."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2683)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, LAYERS, HEADS, T = 32000, 768, 8, 12, 512
PKM_LAYERS = (3, 6)


class PKM(nn.Module):
    def __init__(self, dim, heads=4, num_keys=512, topk=32, dim_head=256):
        super().__init__()
        self.topk, self.heads, self.num_keys, self.dim_head = topk, heads, num_keys, dim_head
        self.to_queries = nn.Linear(dim, dim_head * heads * 2, bias=False)
        self.norm = nn.LayerNorm(dim_head)
        self.keys = nn.Parameter(torch.randn(heads, num_keys, 2, dim_head) * dim_head**-0.5)
        self.values = nn.EmbeddingBag(num_keys**2, dim, mode="sum")
        nn.init.normal_(self.values.weight, std=dim**-0.5)
        self.last_indices = None

    def forward(self, x):
        b, t, e = x.shape
        h = self.heads
        queries = self.to_queries(x).reshape(b, t, 2, h, self.dim_head)
        queries = self.norm(queries)
        dots = torch.einsum("btphd,hnpd->btphn", queries, self.keys)
        scores, indices = dots.topk(k=self.topk, dim=-1)  # (b, t, 2, h, k)
        s1, s2 = scores.unbind(dim=2)
        i1, i2 = indices.unbind(dim=2)
        all_topk = self.topk**2
        all_scores = (s1[..., :, None] + s2[..., None, :]).reshape(b, t, h, all_topk)
        all_indices = (i1[..., :, None] * self.num_keys + i2[..., None, :]).reshape(b, t, h, all_topk)
        final_topk, final_indices = all_scores.topk(self.topk, dim=-1)
        value_indices = all_indices.gather(-1, final_indices)
        attn = final_topk.float().softmax(dim=-1)
        value_indices = value_indices.reshape(-1, self.topk * h)
        attn = attn.reshape(-1, self.topk * h)
        self.last_indices = value_indices.detach()
        out = self.values(value_indices, per_sample_weights=attn)
        return out.reshape(b, t, e)


class Block(nn.Module):
    def __init__(self, use_pkm):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.ff = PKM(D) if use_pkm else nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        B, T_, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T_, HEADS, D // HEADS).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T_, D))
        return x + self.ff(self.ln2(x))


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block(i in PKM_LAYERS) for i in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = LM().to(dev)
values = [p for n, p in model.named_parameters() if n.endswith("ff.values.weight")]
value_ids = {id(p) for p in values}
keys = [p for n, p in model.named_parameters() if n.endswith("ff.keys")]
key_ids = {id(p) for p in keys}
rest = [p for p in model.parameters() if id(p) not in value_ids and id(p) not in key_ids]
opt = torch.optim.AdamW(
    [{"params": rest}, {"params": keys, "lr": 3e-3}, {"params": values, "lr": 1e-2, "weight_decay": 0.0}],
    lr=3e-4,
    weight_decay=0.01,
)
report("setup")

B = 8
for step in range(5):
    tokens = torch.randint(0, VOCAB, (B, T + 1), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
report("train")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    tokens = torch.randint(0, VOCAB, (16, T + 1), device=dev)
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.float().view(-1, VOCAB), tokens[:, 1:].reshape(-1))
    del logits
    for i in PKM_LAYERS:
        pkm = model.blocks[i].ff
        counts = torch.bincount(pkm.last_indices.flatten(), minlength=pkm.num_keys**2)
        used = (counts > 0).float().mean()
        print(f"layer {i} memory usage {used.item():.4f}")
    print(f"eval loss {loss.item():.4f}")
report("eval")
print("done")
