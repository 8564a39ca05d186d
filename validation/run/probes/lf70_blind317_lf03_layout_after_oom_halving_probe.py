"""Probe (helper lf, session 70) for blind317/lf03: the script as it is, with the allocator's
layout printed (segments in address order: size and blocks as size/requested, A allocated, F free)
at the end of the OOM-halving evaluation, after the `empty_cache()` that follows, and after each
resumed training step; `allocated` and the allocated blocks whose size exceeds their request by more
than the rounding after each step. With an argument, the memory history (no stack frames) of the
whole run is dumped to that path. The twin prints the same lines (`vramscope run --gpu h100`)."""

import os
import sys

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "roundup_power2_divisions:[64:8,256:4,>:1]"

import torch
import torch.nn as nn
import torch.nn.functional as F

HIST = sys.argv[1] if len(sys.argv) > 1 else None
if HIST:
    torch.cuda.memory._record_memory_history(context=None, max_entries=10_000_000)


def layout(tag):
    segs = sorted(torch.cuda.memory_snapshot(), key=lambda s: s["address"])
    print(f"== {tag}: allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    for i, s in enumerate(segs):
        blocks = " ".join(
            f"{b['size']}/{b['requested_size']}{'A' if b['state'] == 'active_allocated' else 'F'}"
            for b in s["blocks"]
        )
        print(f"  seg {i} {s['segment_type']} {s['total_size']}: {blocks}")


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
layout("end of the evaluation")
report("limit lowered to 3%, OOM-halving chunked embedding")

torch.cuda.set_per_process_memory_fraction(1.0)
torch.cuda.empty_cache()
layout("after empty_cache")
model.train()
for step in range(4):
    print(f"resumed step {step} loss {train_step(512):.4f}")
    layout(f"after resumed step {step}")
report("limit restored, resumed training")
if HIST:
    torch.cuda.memory._dump_snapshot(HIST)
