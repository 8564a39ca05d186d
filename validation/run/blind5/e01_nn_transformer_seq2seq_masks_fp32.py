"""Translation-style seq2seq with `nn.Transformer` (encoder-decoder, batch_first, dropout 0.1, ReLU) in fp32:
token embeddings scaled by sqrt(d) + sinusoidal positions, right-padded source and target batches with
`src_key_padding_mask` / `tgt_key_padding_mask` / `memory_key_padding_mask`, a bool upper-triangular causal
`tgt_mask`, separate generator Linear, label-smoothed cross entropy ignoring the pad id, Adam with an
inverse-sqrt warmup schedule, 3 steps; then a `no_grad` validation loss."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, ENC, DEC, FF, VOCAB, B, SRC, TGT = (
    (32, 4, 1, 1, 64, 300, 4, 20, 18)
    if os.environ.get("SMOKE")
    else (512, 8, 6, 6, 2048, 32000, 96, 192, 160)
)
PAD = 0
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(501)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=1024):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0))
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(x + self.pe[:, : x.size(1)])


class Seq2SeqTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.src_emb = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = PositionalEncoding(D)
        self.transformer = nn.Transformer(
            d_model=D,
            nhead=HEADS,
            num_encoder_layers=ENC,
            num_decoder_layers=DEC,
            dim_feedforward=FF,
            dropout=0.1,
            batch_first=True,
        )
        self.generator = nn.Linear(D, VOCAB)

    def forward(self, src, tgt_in):
        src_pad = src == PAD
        tgt_pad = tgt_in == PAD
        t = tgt_in.size(1)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=src.device), diagonal=1)
        out = self.transformer(
            self.pos(self.src_emb(src) * math.sqrt(D)),
            self.pos(self.tgt_emb(tgt_in) * math.sqrt(D)),
            tgt_mask=causal,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(out)


def make_batch(length, bsz):
    tokens = torch.randint(3, VOCAB, (bsz, length), device=device)
    lengths = torch.randint(length // 2, length + 1, (bsz,), device=device)
    keep = torch.arange(length, device=device)[None, :] < lengths[:, None]
    return tokens.masked_fill(~keep, PAD)


model = Seq2SeqTransformer().to(device)
for p in model.parameters():
    if p.dim() > 1:
        nn.init.xavier_uniform_(p)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
warmup = 4000
scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: D**-0.5 * min((s + 1) ** -0.5, (s + 1) * warmup**-1.5)
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    src = make_batch(SRC, B)
    tgt = make_batch(TGT + 1, B)
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    logits = model(src, tgt_in)
    loss = F.cross_entropy(
        logits.reshape(-1, VOCAB), tgt_out.reshape(-1), ignore_index=PAD, label_smoothing=0.1
    )
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    scheduler.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    src = make_batch(SRC, B)
    tgt = make_batch(TGT + 1, B)
    logits = model(src, tgt[:, :-1])
    val = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD)
print(f"val loss {val.item():.3f}")
if device == "cuda":
    print(
        f"eval peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
