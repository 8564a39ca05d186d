"""Tacotron 2 written from the paper: character embedding, 3 conv1d+BN encoder layers and a
bidirectional LSTM encoder, a 2-layer prenet with dropout kept on, location-sensitive attention
(conv1d over the cumulative attention weights), two LSTMCell decoders stepped frame by frame with
teacher forcing, linear mel and gate projections and a 5-layer conv1d postnet; mel MSE (before and
after the postnet) and gate BCE on padded mel lengths, fp32, Adam with weight decay, 2 training
steps, then a teacher-forced evaluation under no_grad; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12101)
B, TXT, MEL = (4, 20, 24) if SMALL else (32, 100, 250)
N_MEL, EMB, ATT, DEC = 80, 512, 128, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(148, EMB)
        self.convs = nn.ModuleList(
            nn.Sequential(nn.Conv1d(EMB, EMB, 5, padding=2), nn.BatchNorm1d(EMB)) for _ in range(3)
        )
        self.lstm = nn.LSTM(EMB, EMB // 2, batch_first=True, bidirectional=True)

    def forward(self, text):
        x = self.emb(text).transpose(1, 2)
        for c in self.convs:
            x = F.dropout(F.relu(c(x)), 0.5, self.training)
        out, _ = self.lstm(x.transpose(1, 2))
        return out


class LocationAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(DEC, ATT, bias=False)
        self.memory = nn.Linear(EMB, ATT, bias=False)
        self.loc_conv = nn.Conv1d(2, 32, 31, padding=15, bias=False)
        self.loc_dense = nn.Linear(32, ATT, bias=False)
        self.v = nn.Linear(ATT, 1, bias=False)

    def forward(self, q, memory, processed, cat_weights, mask):
        loc = self.loc_dense(self.loc_conv(cat_weights).transpose(1, 2))
        e = self.v(torch.tanh(self.query(q).unsqueeze(1) + loc + processed)).squeeze(-1)
        e = e.masked_fill(mask, float("-inf"))
        w = F.softmax(e, dim=1)
        ctx = torch.bmm(w.unsqueeze(1), memory).squeeze(1)
        return ctx, w


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.prenet = nn.ModuleList([nn.Linear(N_MEL, 256), nn.Linear(256, 256)])
        self.att_rnn = nn.LSTMCell(256 + EMB, DEC)
        self.attention = LocationAttention()
        self.dec_rnn = nn.LSTMCell(DEC + EMB, DEC)
        self.proj = nn.Linear(DEC + EMB, N_MEL)
        self.gate = nn.Linear(DEC + EMB, 1)

    def forward(self, memory, mels, mask):
        b, t_in, _ = memory.shape
        go = memory.new_zeros(b, 1, N_MEL)
        x = torch.cat([go, mels.transpose(1, 2)[:, :-1]], 1)
        for lin in self.prenet:
            x = F.dropout(F.relu(lin(x)), 0.5, training=True)
        processed = self.attention.memory(memory)
        ah = memory.new_zeros(b, DEC)
        ac = memory.new_zeros(b, DEC)
        dh = memory.new_zeros(b, DEC)
        dc = memory.new_zeros(b, DEC)
        w = memory.new_zeros(b, t_in)
        wcum = memory.new_zeros(b, t_in)
        ctx = memory.new_zeros(b, EMB)
        outs, gates, aligns = [], [], []
        for t in range(x.shape[1]):
            ah, ac = self.att_rnn(torch.cat([x[:, t], ctx], -1), (ah, ac))
            ah = F.dropout(ah, 0.1, self.training)
            ctx, w = self.attention(ah, memory, processed, torch.stack([w, wcum], 1), mask)
            wcum = wcum + w
            dh, dc = self.dec_rnn(torch.cat([ah, ctx], -1), (dh, dc))
            dh = F.dropout(dh, 0.1, self.training)
            hc = torch.cat([dh, ctx], -1)
            outs.append(self.proj(hc))
            gates.append(self.gate(hc))
            aligns.append(w)
        return torch.stack(outs, 2), torch.cat(gates, 1), torch.stack(aligns, 1)


class Postnet(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [N_MEL, 512, 512, 512, 512, N_MEL]
        self.convs = nn.ModuleList(
            nn.Sequential(nn.Conv1d(chans[i], chans[i + 1], 5, padding=2), nn.BatchNorm1d(chans[i + 1]))
            for i in range(5)
        )

    def forward(self, x):
        for i, c in enumerate(self.convs):
            x = c(x)
            if i < 4:
                x = torch.tanh(x)
            x = F.dropout(x, 0.5, self.training)
        return x


class Tacotron2(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.decoder = Decoder()
        self.postnet = Postnet()

    def forward(self, text, text_lens, mels):
        memory = self.encoder(text)
        mask = torch.arange(text.shape[1], device=text.device)[None] >= text_lens[:, None]
        mel, gate, align = self.decoder(memory, mels, mask)
        return mel, mel + self.postnet(mel), gate, align


model = Tacotron2().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=1e-6)


def batch():
    text_lens = torch.randint(TXT // 2, TXT + 1, (B,), device=device)
    text_lens[0] = TXT
    text = torch.randint(1, 148, (B, TXT), device=device)
    text = text * (torch.arange(TXT, device=device)[None] < text_lens[:, None])
    mel_lens = torch.randint(MEL // 2, MEL + 1, (B,), device=device)
    mel_lens[0] = MEL
    mels = torch.randn(B, N_MEL, MEL, device=device)
    return text, text_lens, mels, mel_lens


def loss_fn(out, mels, mel_lens):
    mel, post, gate, _ = out
    valid = (torch.arange(MEL, device=device)[None] < mel_lens[:, None]).float()
    gate_t = (torch.arange(MEL, device=device)[None] >= (mel_lens[:, None] - 1)).float()
    m = valid.unsqueeze(1)
    l_mel = (((mel - mels) ** 2) * m).sum() / (m.sum() * N_MEL) + (((post - mels) ** 2) * m).sum() / (
        m.sum() * N_MEL
    )
    return l_mel + F.binary_cross_entropy_with_logits(gate, gate_t)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(2):
    text, text_lens, mels, mel_lens = batch()
    loss = loss_fn(model(text, text_lens, mels), mels, mel_lens)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss, text, mels
model.eval()
with torch.no_grad():
    text, text_lens, mels, mel_lens = batch()
    mel, post, gate, align = model(text, text_lens, mels)
if device == "cuda":
    print(
        f"eval align {tuple(align.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del mel, post, gate, align
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
