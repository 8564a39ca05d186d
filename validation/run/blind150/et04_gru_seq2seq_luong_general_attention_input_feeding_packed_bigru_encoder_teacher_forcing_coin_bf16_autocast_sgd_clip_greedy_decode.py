"""A GRU sequence-to-sequence translator with Luong attention as OpenNMT-py's early RNN models
write it: source and target vocabularies of 32,000, 512-dimensional embeddings (padding_idx 0), a
2-layer bidirectional GRU encoder of 512 units a direction over packed padded sources
(pack_padded_sequence(enforce_sorted=False), lengths 10..60), its last states bridged by a linear
layer into a 2-layer GRU decoder of 1,024 units run one step at a time with input feeding (the
previous attentional vector concatenated to the embedding), Luong's "general" score
(bmm against a linear map of the encoder states, padded positions filled with -inf), the
attentional vector tanh(W[c; h]) projected to the vocabulary; teacher forcing decided per step by
a coin (Python's random, p 0.5) else the argmax fed back; the per-step cross-entropy
(ignore_index 0) summed over 48 target steps; bf16 autocast, SGD (lr 1.0) with clip_grad_norm_ at
5.0, batch 160, 3 steps; then a greedy decode of 512 sentences for 64 steps under no_grad; 5
phases."""

import os
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15004)
random.seed(15004)
SV, TV, EMB, EH, DH, B, SRC, TGT, STEPS, EB, DEC = (
    (500, 600, 32, 32, 64, 8, 12, 10, 2, 8, 12)
    if SMALL
    else (32000, 32000, 512, 512, 1024, 160, 60, 48, 3, 512, 64)
)
PAD, BOS = 0, 1
device = "cuda" if torch.cuda.is_available() else "cpu"


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(SV, EMB, padding_idx=PAD)
        self.rnn = nn.GRU(EMB, EH, 2, batch_first=True, bidirectional=True, dropout=0.3)
        self.bridge = nn.Linear(2 * EH, DH)

    def forward(self, src, lengths):
        packed = pack_padded_sequence(self.emb(src), lengths.cpu(), batch_first=True, enforce_sorted=False)
        out, h = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        h = h.view(2, 2, src.size(0), EH).transpose(1, 2).reshape(2, src.size(0), 2 * EH)
        return out, torch.tanh(self.bridge(h))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(TV, EMB, padding_idx=PAD)
        self.rnn = nn.GRU(EMB + DH, DH, 2, batch_first=True, dropout=0.3)
        self.attn_in = nn.Linear(2 * EH, DH, bias=False)  # Luong "general": h_t^T W h_s
        self.attn_out = nn.Linear(2 * EH + DH, DH, bias=False)
        self.drop = nn.Dropout(0.3)
        self.gen = nn.Linear(DH, TV)

    def step(self, tok, feed, hidden, keys, values, pad_mask):
        x = torch.cat([self.emb(tok), feed], dim=-1).unsqueeze(1)
        out, hidden = self.rnn(x, hidden)
        scores = torch.bmm(out, keys.transpose(1, 2)).masked_fill(pad_mask.unsqueeze(1), float("-inf"))
        ctx = torch.bmm(F.softmax(scores, dim=-1), values)
        attn_h = torch.tanh(self.attn_out(torch.cat([ctx, out], dim=-1))).squeeze(1)
        return self.gen(self.drop(attn_h)), attn_h, hidden


enc, dec = Encoder().to(device), Decoder().to(device)
params = list(enc.parameters()) + list(dec.parameters())
opt = torch.optim.SGD(params, lr=1.0)


def make_batch(n):
    lengths = torch.randint(10, SRC + 1, (n,))
    src = torch.randint(2, SV, (n, SRC))
    src[torch.arange(SRC).unsqueeze(0) >= lengths.unsqueeze(1)] = PAD
    tlen = torch.randint(8, TGT + 1, (n,))
    tgt = torch.randint(2, TV, (n, TGT + 1))
    tgt[:, 0] = BOS
    tgt[torch.arange(TGT + 1).unsqueeze(0) > tlen.unsqueeze(1)] = PAD
    return src.to(device), lengths.to(device), tgt.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

enc.train()
dec.train()
for step in range(STEPS):
    src, lengths, tgt = make_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        values, hidden = enc(src, lengths)
        keys = dec.attn_in(values)
        pad_mask = src.eq(PAD)
        feed = values.new_zeros(B, DH)
        tok = tgt[:, 0]
        loss = 0.0
        for t in range(1, TGT + 1):
            logits, feed, hidden = dec.step(tok, feed, hidden, keys, values, pad_mask)
            loss = loss + F.cross_entropy(logits.float(), tgt[:, t], ignore_index=PAD, reduction="sum")
            tok = tgt[:, t] if random.random() < 0.5 else logits.argmax(-1)
        loss = loss / tgt[:, 1:].ne(PAD).sum()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(params, 5.0)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, logits, values, keys, hidden, feed
enc.eval()
dec.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    src, lengths, _ = make_batch(EB)
    values, hidden = enc(src, lengths)
    keys = dec.attn_in(values)
    pad_mask = src.eq(PAD)
    feed = values.new_zeros(EB, DH)
    tok = torch.full((EB,), BOS, dtype=torch.long, device=device)
    outs = []
    for _ in range(DEC):
        logits, feed, hidden = dec.step(tok, feed, hidden, keys, values, pad_mask)
        tok = logits.argmax(-1)
        outs.append(tok)
    hyp = torch.stack(outs, 1)
if device == "cuda":
    print(
        f"decode {tuple(hyp.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
