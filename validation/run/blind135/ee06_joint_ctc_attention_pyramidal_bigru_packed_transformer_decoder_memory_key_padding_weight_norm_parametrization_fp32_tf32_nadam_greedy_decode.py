"""Joint CTC-attention speech recognition (ESPnet's hybrid recipe written with torch.nn alone): a
listener of 3 bidirectional GRU layers of 512 (nn.GRU, each over pack_padded_sequence of sorted
lengths) with pyramidal frame-pair concatenation halving time between them, a CTC head (weight 0.3,
nn.CTCLoss(reduction="sum") / batch) and an nn.TransformerDecoder (4 layers of 512, 8 heads,
norm_first) over the listener's memory with memory_key_padding_mask, tgt_key_padding_mask and a
causal mask, its output layer under nn.utils.parametrizations.weight_norm, over 5,000 word pieces,
label smoothing 0.1; fp32 with TF32, NAdam, clip_grad_norm_(foreach=True); 3 steps at batch 32 x
1,600 frames, then under no_grad the listener over 64 utterances and a greedy attention decode of 40
tokens (the decoder re-run over the growing prefix, the CTC argmax beside it); 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrizations
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13506)
B, TMAX, HID, U, V, NEVAL, GEN = (4, 64, 32, 8, 300, 4, 5) if SMALL else (32, 1600, 512, 60, 5000, 64, 40)
D, NMEL, SOS, EOS, PAD = 512, 80, 1, 2, 0
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


class Listener(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.GRU(NMEL if i == 0 else 4 * HID, HID, batch_first=True, bidirectional=True) for i in range(3)
        )
        self.proj = nn.Linear(2 * HID, D)

    def forward(self, x, lengths):
        for i, gru in enumerate(self.layers):
            if i > 0:
                t = x.size(1) // 2
                x = x[:, : 2 * t].reshape(x.size(0), t, 4 * HID)
                lengths = lengths // 2
            packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True)
            y, _ = gru(packed)
            x, _ = pad_packed_sequence(y, batch_first=True)
        return self.proj(x), lengths


class Speller(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D, padding_idx=PAD)
        self.pos = nn.Embedding(256, D)
        layer = nn.TransformerDecoderLayer(D, 8, 2048, 0.1, batch_first=True, norm_first=True)
        self.dec = nn.TransformerDecoder(layer, 4, norm=nn.LayerNorm(D))
        self.out = parametrizations.weight_norm(nn.Linear(D, V))

    def forward(self, ys, memory, mem_pad, ys_pad=None):
        t = ys.size(1)
        x = self.emb(ys) + self.pos(torch.arange(t, device=ys.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=ys.device, dtype=torch.bool)
        h = self.dec(
            x,
            memory,
            tgt_mask=mask,
            tgt_is_causal=True,
            tgt_key_padding_mask=ys_pad,
            memory_key_padding_mask=mem_pad,
        )
        return self.out(h)


class ASR(nn.Module):
    def __init__(self):
        super().__init__()
        self.listener = Listener()
        self.ctc_head = nn.Linear(D, V)
        self.speller = Speller()


def batch(n):
    lengths = torch.randint(TMAX // 2, TMAX + 1, (n,)).sort(descending=True).values
    lengths[0] = TMAX
    feats = torch.randn(n, TMAX, NMEL, device=device)
    ulen = torch.randint(U // 2, U + 1, (n,))
    ys = torch.randint(3, V, (n, U + 2), device=device)
    ys[:, 0] = SOS
    ypad = torch.arange(U + 2)[None] > ulen[:, None] + 1
    ys[torch.arange(n), ulen + 1] = EOS
    ys = ys.masked_fill(ypad.to(device), PAD)
    return feats, lengths.to(device), ys, ypad.to(device), ulen.to(device)


model = ASR().to(device)
ctc = nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)
opt = torch.optim.NAdam(model.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    feats, lengths, ys, ypad, ulen = batch(B)
    memory, mlen = model.listener(feats, lengths)
    mem_pad = torch.arange(memory.size(1), device=device)[None] >= mlen[:, None]
    logp = model.ctc_head(memory).log_softmax(-1).transpose(0, 1)
    l_ctc = ctc(logp, ys[:, 1 : U + 1], mlen, ulen) / B
    logits = model.speller(ys[:, :-1], memory, mem_pad, ypad[:, :-1])
    l_att = F.cross_entropy(
        logits.reshape(-1, V), ys[:, 1:].reshape(-1), ignore_index=PAD, label_smoothing=0.1
    )
    loss = 0.3 * l_ctc + 0.7 * l_att
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gnorm = nn.utils.clip_grad_norm_(model.parameters(), 5.0, foreach=True)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} ctc {l_ctc.item():.3f} att {l_att.item():.3f} gnorm {gnorm.item():.2f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    feats, lengths, ys, ypad, ulen = batch(NEVAL)
    memory, mlen = model.listener(feats, lengths)
    mem_pad = torch.arange(memory.size(1), device=device)[None] >= mlen[:, None]
    ctc_best = model.ctc_head(memory).argmax(-1)
if device == "cuda":
    print(
        f"listen {tuple(memory.shape)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    hyp = torch.full((NEVAL, 1), SOS, dtype=torch.long, device=device)
    for _ in range(GEN):
        nxt = model.speller(hyp, memory, mem_pad)[:, -1].argmax(-1)
        hyp = torch.cat([hyp, nxt[:, None]], 1)
if device == "cuda":
    print(
        f"greedy {tuple(hyp.shape)} ctc {tuple(ctc_best.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
