"""A translation model on torch.nn.Transformer as its tutorials write it: shared source/target
embedding tied to the generator (scaled by sqrt(d_model)), sinusoidal positions, pre-LN
(norm_first=True), batch_first, 6 + 6 layers of 768 with 12 heads; bool key-padding masks from
per-sentence lengths and the float causal mask of generate_square_subsequent_mask; label-smoothed
cross-entropy ignoring padding; bf16 autocast, fused AdamW with the Noam schedule (LambdaLR) and
clip_grad_norm_(foreach=True); 3 steps, a teacher-forced validation loss under no_grad, then greedy
decoding of 64 sentences under inference_mode in fp32 (the encoder's fast path; memory computed once,
the decoder re-run over the growing prefix); 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13501)
B, S, T, D, H, L, V, GEN = (4, 16, 12, 64, 4, 2, 1000, 6) if SMALL else (96, 256, 200, 768, 12, 6, 32000, 48)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
PAD, BOS, EOS = 0, 1, 2


class PositionalEncoding(nn.Module):
    def __init__(self, d, max_len=1024, dropout=0.1):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return self.drop(x + self.pe[:, : x.size(1)])


class Translator(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D, padding_idx=PAD)
        self.pos = PositionalEncoding(D)
        self.transformer = nn.Transformer(
            D, H, L, L, dim_feedforward=4 * D, dropout=0.1, batch_first=True, norm_first=True
        )
        self.generator = nn.Linear(D, V, bias=False)
        self.generator.weight = self.emb.weight

    def embed(self, tokens):
        return self.pos(self.emb(tokens) * math.sqrt(D))

    def encode(self, src, src_pad):
        return self.transformer.encoder(self.embed(src), src_key_padding_mask=src_pad)

    def decode(self, tgt, memory, src_pad, tgt_pad=None):
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(1), device=tgt.device)
        h = self.transformer.decoder(
            self.embed(tgt),
            memory,
            tgt_mask=mask,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(h)

    def forward(self, src, tgt_in, src_pad, tgt_pad):
        return self.decode(tgt_in, self.encode(src, src_pad), src_pad, tgt_pad)


def batch(n):
    src_len = torch.randint(S // 2, S + 1, (n,), device=device)
    tgt_len = torch.randint(T // 2, T + 1, (n,), device=device)
    src = torch.randint(3, V, (n, S), device=device)
    tgt = torch.randint(3, V, (n, T + 1), device=device)
    src_pad = torch.arange(S, device=device)[None] >= src_len[:, None]
    tgt_pad = torch.arange(T + 1, device=device)[None] >= tgt_len[:, None]
    src = src.masked_fill(src_pad, PAD)
    tgt[:, 0] = BOS
    tgt = tgt.masked_fill(tgt_pad, PAD)
    return src, src_pad, tgt[:, :-1], tgt[:, 1:], tgt_pad[:, :-1]


model = Translator().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.01, fused=amp)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: D**-0.5 * min((s + 1) ** -0.5, (s + 1) * 4000**-1.5))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    src, src_pad, tgt_in, tgt_out, tgt_pad = batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(src, tgt_in, src_pad, tgt_pad)
        loss = F.cross_entropy(
            logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD, label_smoothing=0.1
        )
    loss.backward()
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} gnorm {gnorm.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    src, src_pad, tgt_in, tgt_out, tgt_pad = batch(B)
    logits = model(src, tgt_in, src_pad, tgt_pad)
    val = F.cross_entropy(logits.float().reshape(-1, V), tgt_out.reshape(-1), ignore_index=PAD)
    del logits
if device == "cuda":
    print(
        f"valid loss {val.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.inference_mode():
    n = 64 if not SMALL else 4
    src, src_pad = batch(n)[:2]
    memory = model.encode(src, src_pad)
    ys = torch.full((n, 1), BOS, dtype=torch.long, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    for _ in range(GEN):
        out = model.decode(ys, memory, src_pad)[:, -1]
        nxt = out.argmax(-1).masked_fill(done, PAD)
        done |= nxt == EOS
        ys = torch.cat([ys, nxt[:, None]], dim=1)
if device == "cuda":
    print(
        f"greedy {tuple(ys.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
