"""nn.Transformer (encoder-decoder, 512 wide, 6+6 layers, 8 heads, norm_first, batch_first) for
translation under fp16 autocast with torch.amp.GradScaler: source and target embeddings, a causal
target mask and padding masks on both sides, a 32k-vocabulary output, batch 32 of 256 source and 200
target tokens, AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2806)
D, L, H, V, B, SS, ST = (32, 1, 4, 64, 2, 12, 10) if SMALL else (512, 6, 8, 32000, 32, 256, 200)
device = "cuda" if torch.cuda.is_available() else "cpu"
src_emb, tgt_emb = nn.Embedding(V, D).to(device), nn.Embedding(V, D).to(device)
model = nn.Transformer(D, H, L, L, dim_feedforward=4 * D, dropout=0.1, batch_first=True, norm_first=True).to(
    device
)
out_proj = nn.Linear(D, V).to(device)
params = [*src_emb.parameters(), *tgt_emb.parameters(), *model.parameters(), *out_proj.parameters()]
optimizer = torch.optim.AdamW(params, lr=1e-4)
scaler = torch.amp.GradScaler(device)
causal = nn.Transformer.generate_square_subsequent_mask(ST, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    src = torch.randint(1, V, (B, SS), device=device)
    tgt = torch.randint(1, V, (B, ST + 1), device=device)
    src_pad = torch.zeros(B, SS, dtype=torch.bool, device=device)
    src_pad[:, SS - 16 :] = True
    tgt_pad = torch.zeros(B, ST, dtype=torch.bool, device=device)
    with torch.autocast(device, dtype=torch.float16):
        h = model(
            src_emb(src),
            tgt_emb(tgt[:, :-1]),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        loss = F.cross_entropy(out_proj(h).float().reshape(-1, V), tgt[:, 1:].reshape(-1))
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    del src, tgt, src_pad, tgt_pad, h, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
