"""Translation-style training with PyTorch's full nn.Transformer (encoder and decoder, pre-norm,
batch_first), a causal target mask from generate_square_subsequent_mask and padding masks for both
sides, shared embeddings, fp32, Adam with inverse-square-root warmup, d_model 512, 6+6 layers,
batch 32, 256 source and 255 target tokens, 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4203)
V, D, L, B, S, T = (64, 32, 1, 2, 12, 10) if SMALL else (32000, 512, 6, 32, 256, 255)
device = "cuda" if torch.cuda.is_available() else "cpu"
emb = nn.Embedding(V, D).to(device)
model = nn.Transformer(D, 8, L, L, 4 * D, dropout=0.1, batch_first=True, norm_first=True).to(device)
head = nn.Linear(D, V).to(device)
params = list(emb.parameters()) + list(model.parameters()) + list(head.parameters())
optimizer = torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.98))
sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min((s + 1) ** -0.5, (s + 1) * 4000**-1.5))
causal = nn.Transformer.generate_square_subsequent_mask(T, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(1, V, (B, S), device=device)
    tgt = torch.randint(1, V, (B, T + 1), device=device)
    src_pad = torch.zeros(B, S, dtype=torch.bool, device=device)
    src_pad[:, S - 20 :] = True
    tgt_pad = torch.zeros(B, T, dtype=torch.bool, device=device)
    out = model(
        emb(src),
        emb(tgt[:, :-1]),
        tgt_mask=causal,
        src_key_padding_mask=src_pad,
        tgt_key_padding_mask=tgt_pad,
        memory_key_padding_mask=src_pad,
        tgt_is_causal=True,
    )
    loss = F.cross_entropy(head(out).view(-1, V), tgt[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    sched.step()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, src_pad, tgt_pad, out, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
