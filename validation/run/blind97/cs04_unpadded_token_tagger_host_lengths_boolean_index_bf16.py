"""A hand-written 6-layer transformer token tagger (768 wide, 12 heads) trained on unpadded tokens:
each batch of 48 sequences has lengths drawn on the host (64 to 512) and copied to the GPU; the
padding mask is built from arange < lengths, the real tokens are gathered with a boolean index
(x[mask]), the feed-forward blocks and the tagging loss run on the unpadded tokens only, and each
attention scatters them back into the padded (B, L, D) layout for SDPA with a boolean key-padding
mask; token labels come from a host list per sequence, concatenated and copied; bf16 autocast with
fused AdamW, 4 steps with new lengths each, then an eval pass over a batch of 96 under
inference_mode; 6 phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9704)
rng = random.Random(9704)
if SMALL:
    B, BE, L, D, H, LAYERS, VOCAB, TAGS = 4, 6, 32, 64, 4, 2, 100, 9
else:
    B, BE, L, D, H, LAYERS, VOCAB, TAGS = 48, 96, 512, 768, 12, 6, 30000, 17
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, tok, mask):
        qkv_tok = self.qkv(self.ln1(tok))
        qkv = qkv_tok.new_zeros(mask.shape[0], mask.shape[1], 3 * D)
        qkv[mask] = qkv_tok
        q, k, v = qkv.view(mask.shape[0], mask.shape[1], 3, H, D // H).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :])
        att = att.transpose(1, 2).reshape(mask.shape[0], mask.shape[1], D)[mask]
        tok = tok + self.proj(att)
        return tok + self.ff(self.ln2(tok))


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(L, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, TAGS)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        tok = (self.emb(ids) + self.pos(pos))[mask]
        for blk in self.blocks:
            tok = blk(tok, mask)
        return self.head(self.ln(tok))


def batch(n):
    lengths = [rng.randint(L // 8, L) for _ in range(n)]
    tags = [rng.randrange(TAGS) for n_tok in lengths for _ in range(n_tok)]
    lengths = torch.tensor(lengths).to(device)
    mask = torch.arange(L, device=device)[None, :] < lengths[:, None]
    ids = torch.randint(1, VOCAB, (n, L), device=device) * mask
    return ids, mask, torch.tensor(tags).to(device)


model = Tagger().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    ids, mask, tags = batch(B)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(ids, mask)
    loss = F.cross_entropy(logits.float(), tags)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} tokens {tags.numel()} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, tags, logits, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    ids, mask, tags = batch(BE)
    acc = (model(ids, mask).argmax(-1) == tags).float().mean()
if device == "cuda":
    print(
        f"eval {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
