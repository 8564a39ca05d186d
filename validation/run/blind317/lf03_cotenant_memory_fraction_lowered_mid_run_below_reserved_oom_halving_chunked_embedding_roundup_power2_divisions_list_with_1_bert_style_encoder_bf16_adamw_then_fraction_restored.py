"""A BERT-style document classifier trained on a shared GPU whose budget shrinks mid-run: the allocator is
configured before torch is imported (`PYTORCH_CUDA_ALLOC_CONF="roundup_power2_divisions:[64:8,256:4,>:1]"`:
requests up to 64 MB round to eighths of their power-of-two interval, up to 256 MB to quarters, larger ones
are not rounded beyond the usual 2 MB), then, when a co-tenant arrives, the script lowers its own limit with
`torch.cuda.set_per_process_memory_fraction(0.03)` - below what it has already reserved - and embeds a corpus
in chunks found by halving on `torch.OutOfMemoryError`, before the limit is raised back to 1.0 and training
resumes.

The model: token + position embeddings (30,522 x 768, 512 positions), 8 post-norm `nn.TransformerEncoderLayer`
blocks (768 wide, 12 heads, feed-forward 3,072, GELU, batch_first, dropout 0.1), mean pooling over the
attention mask, a 2-layer head to 20 classes; fp32 weights under bf16 autocast, AdamW. Training batches have
varying lengths (192, 320, 448, 512 tokens, batch 24) with padding masks.

Phases: set-up; 8 training steps at varying lengths; the gradients dropped, the limit lowered to 3% and 6,144
documents of 384 tokens embedded under `no_grad` in eval mode, chunks starting at 2,048 and halved on each
out-of-memory error (the embeddings gathered on the host); the limit restored to 1.0, `empty_cache()`, 4 more
training steps at 512 tokens. 4 phases. Seeded; sizes depend only on the allocator's figures."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:[64:8,256:4,>:1]"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3173)
dev = torch.device("cuda")
V, P, D, L, NCLS = 30522, 512, 768, 8, 20


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class DocEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D, padding_idx=0)
        self.pos = nn.Embedding(P, D)
        self.ln = nn.LayerNorm(D)
        layer = nn.TransformerEncoderLayer(D, 12, 3072, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.head = nn.Sequential(nn.Linear(D, D), nn.Tanh(), nn.Linear(D, NCLS))

    def embed(self, ids, mask):
        x = self.ln(self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device)))
        h = self.encoder(x, src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return (h * m).sum(1) / m.sum(1).clamp_min(1.0)

    def forward(self, ids, mask):
        return self.head(self.embed(ids, mask))


def batch(n, t):
    lengths = torch.randint(t // 2, t + 1, (n,), device=dev)
    mask = torch.arange(t, device=dev)[None, :] < lengths[:, None]
    ids = torch.randint(1, V, (n, t), device=dev).masked_fill(~mask, 0)
    return ids, mask


model = DocEncoder().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
report("set-up")


def train_step(t):
    ids, mask = batch(24, t)
    y = torch.randint(0, NCLS, (24,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids, mask)
    loss = F.cross_entropy(logits.float(), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


for step, t in enumerate([192, 320, 448, 512, 320, 512, 192, 448]):
    print(f"step {step} len {t} loss {train_step(t):.4f}")
report("8 training steps at varying lengths")

opt.zero_grad(set_to_none=True)
torch.cuda.set_per_process_memory_fraction(0.03)
model.eval()
N_DOCS, T_EVAL = 6144, 384
chunk, done, out = 2048, 0, []
with torch.no_grad():
    while done < N_DOCS:
        n = min(chunk, N_DOCS - done)
        try:
            ids, mask = batch(n, T_EVAL)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                emb = model.embed(ids, mask)
            out.append(emb.float().cpu())
            done += n
            del ids, mask, emb
        except torch.OutOfMemoryError:
            chunk //= 2
            print(f"out of memory at chunk {n}; retrying with {chunk}")
emb_all = torch.cat(out)
n_ooms = torch.cuda.memory_stats()["num_ooms"]
print(f"embedded {emb_all.shape[0]} docs with chunk {chunk}; num_ooms {n_ooms}")
report("limit lowered to 3%, OOM-halving chunked embedding")

torch.cuda.set_per_process_memory_fraction(1.0)
torch.cuda.empty_cache()
model.train()
for step in range(4):
    print(f"resumed step {step} loss {train_step(512):.4f}")
report("limit restored, resumed training")
