"""MEGABYTE (Yu et al. 2023) by hand with BLT-style hash n-gram byte embeddings, random bytes.

Model: bytes (256 values) are embedded in 128 dimensions as a byte embedding plus, as the Byte Latent
Transformer does, hash n-gram embeddings: for n = 3..6 a polynomial rolling hash of the n bytes ending
at each position picks one of 65,536 buckets of its own table, and an `nn.EmbeddingBag` (mode "sum")
adds the four rows. Patches of 8 bytes are concatenated into 1,024-dim patch embeddings for a global
causal transformer (12 layers of 1024, 16 heads, SDPA is_causal) whose input is shifted by one patch
(a learned pad patch first). Its output is split back into 8 byte slots, projected to 512 and added to
the within-patch shifted byte embeddings of a local causal transformer (4 layers of 512 over the 8
bytes of every patch, all patches as one batch) that predicts the bytes (cross-entropy over 256).
`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` is set at the top.

Phases: the first step (bf16 autocast, fused AdamW, 8 x 8,192 bytes); 2 more steps; bits per byte
under no_grad at batch 16; patch-by-patch sampling of 4 patches (32 bytes, temperature 0.8,
torch.multinomial) after a 2,048-byte prompt at batch 8 under inference_mode; then the optimizer
freed, `empty_cache()`, and 32,768-byte sequences at batch 2 with every global layer checkpointed
(non-reentrant) under bf16 autocast with a single-tensor AdamW. 5 phases."""

import math
import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2095)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
P = 8
if SMALL:
    DG, LG, HG, DL, LL, HL, T, BATCH, BUCKETS, PROMPT = 128, 2, 4, 64, 1, 2, 512, 2, 1024, 256
else:
    DG, LG, HG, DL, LL, HL, T, BATCH, BUCKETS, PROMPT = 1024, 12, 16, 512, 4, 8, 8192, 8, 65536, 2048
NGRAMS = (3, 4, 5, 6)
PRIME = 1_000_003
E = DG // P  # per-byte embedding width: a patch of P bytes is one DG-dim global token


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d, bias=False)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def ngram_ids(x):
    """(B, T) bytes -> (B, T, len(NGRAMS)) bucket ids, one table of BUCKETS per n (BLT's hash embeddings)."""
    padded = F.pad(x, (max(NGRAMS) - 1, 0))
    ids = []
    h = torch.zeros_like(x)
    for k in range(max(NGRAMS)):
        h = (h * PRIME + padded[:, max(NGRAMS) - 1 - k : padded.shape[1] - k] + 1) % (1 << 31)
        n = k + 1
        if n in NGRAMS:
            ids.append(h % BUCKETS + NGRAMS.index(n) * BUCKETS)
    return torch.stack(ids, dim=-1)


class Megabyte(nn.Module):
    def __init__(self):
        super().__init__()
        self.byte_emb = nn.Embedding(256, E)
        self.ngram_emb = nn.EmbeddingBag(len(NGRAMS) * BUCKETS, E, mode="sum")
        self.global_pad = nn.Parameter(torch.randn(DG) * 0.02)
        self.global_pos = nn.Embedding(32768 // P, DG)
        self.global_blocks = nn.ModuleList([Block(DG, HG) for _ in range(LG)])
        self.global_ln = nn.LayerNorm(DG)
        self.to_local = nn.Linear(E, DL)
        self.local_emb = nn.Embedding(257, DL)  # 256 = the pad byte that starts every patch
        self.local_pos = nn.Embedding(P, DL)
        self.local_blocks = nn.ModuleList([Block(DL, HL) for _ in range(LL)])
        self.local_ln = nn.LayerNorm(DL)
        self.head = nn.Linear(DL, 256, bias=False)
        self.checkpoint_global = False

    def embed(self, x):
        b, t = x.shape
        ngrams = self.ngram_emb(ngram_ids(x).view(b * t, len(NGRAMS))).view(b, t, E)
        return self.byte_emb(x) + ngrams

    def global_model(self, x):
        b, t = x.shape
        patches = self.embed(x).view(b, t // P, DG)
        h = torch.cat([self.global_pad.expand(b, 1, DG).to(patches.dtype), patches[:, :-1]], dim=1)
        h = h + self.global_pos.weight[: t // P]
        for blk in self.global_blocks:
            if self.checkpoint_global and self.training:
                h = checkpoint(blk, h, use_reentrant=False)
            else:
                h = blk(h)
        return self.global_ln(h).view(b, t // P, P, E)

    def local_model(self, g, patch_bytes):
        # g: (N, p, E) global slots; patch_bytes: (N, p) bytes of the patch, shifted in by the pad byte
        p = patch_bytes.shape[1]
        shifted = torch.cat([torch.full_like(patch_bytes[:, :1], 256), patch_bytes[:, :-1]], dim=1)
        h = self.to_local(g) + self.local_emb(shifted) + self.local_pos.weight[:p]
        for blk in self.local_blocks:
            h = blk(h)
        return self.head(self.local_ln(h))

    def forward(self, x):
        b, t = x.shape
        g = self.global_model(x).reshape(b * t // P, P, E)
        return self.local_model(g, x.view(b * t // P, P)).view(b, t, 256)


def loss_fn(model, x):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    return F.cross_entropy(logits.float().view(-1, 256), x.view(-1))


model = Megabyte().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=amp)
model.train()
for step in range(3):
    x = torch.randint(0, 256, (BATCH, T), device=device)
    loss = loss_fn(model, x)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
with torch.no_grad():
    x = torch.randint(0, 256, (2 * BATCH, T), device=device)
    bpb = loss_fn(model, x) / math.log(2)
print(f"eval bits per byte {bpb.item():.4f}")
del x
report("eval")


@torch.inference_mode()
def sample(prompt, patches, temperature=0.8):
    seq = prompt
    for _ in range(patches):
        nxt = torch.zeros(seq.shape[0], P, dtype=seq.dtype, device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            # the next patch's global slots: the global model over the prompt plus a placeholder patch
            g = model.global_model(torch.cat([seq, nxt], dim=1))[:, -1]
            for i in range(P):
                logits = model.local_model(g[:, : i + 1], nxt[:, : i + 1])[:, -1].float()
                nxt[:, i] = torch.multinomial(F.softmax(logits / temperature, dim=-1), 1).squeeze(1)
        seq = torch.cat([seq, nxt], dim=1)
    return seq


out = sample(torch.randint(0, 256, (BATCH, PROMPT), device=device), 4)
print(f"sampled {tuple(out.shape)}")
del out
report("sample")

del opt
torch.cuda.empty_cache()
model.train()
model.checkpoint_global = True
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=False)
for step in range(2):
    x = torch.randint(0, 256, (max(BATCH // 4, 1), 4 * T), device=device)
    loss = loss_fn(model, x)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"32k checkpointed step {step} loss {loss.item():.4f}")
report("32k bytes checkpointed")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
