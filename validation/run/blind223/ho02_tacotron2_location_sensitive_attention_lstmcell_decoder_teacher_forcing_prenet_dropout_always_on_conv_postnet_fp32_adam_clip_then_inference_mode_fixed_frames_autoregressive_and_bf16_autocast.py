"""Tacotron 2 by hand: character embedding, 3 conv1d-BN-ReLU encoder layers and a bidirectional LSTM (512),
a decoder loop of LSTMCells (attention RNN 1024, decoder RNN 1024) with location-sensitive attention
(processed memory, location conv1d of 32 filters over cumulative + previous attention weights, tanh energy,
softmax with the padded characters masked to -inf), a prenet of two 256 linears whose dropout is always on
(also at inference, as in the paper), teacher forcing with reduction factor 2, mel + stop-token
projections and a 5-layer conv1d postnet.

fp32, Adam (lr 1e-3, weight decay 1e-6), gradient clipping at 1.0, batch 64, 96 characters, 240 frames
(120 decoder steps). Phases: 2 training steps; autoregressive synthesis under inference_mode for a fixed
160 decoder steps (no stop-token early exit) at batch 32; 2 training steps under bf16 autocast. 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2232)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T_TXT, T_MEL = (2, 12, 16) if SMALL else (64, 96, 240)
MEL, R, VOCAB = 80, 2, 100


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
              f"reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 512)
        self.convs = nn.ModuleList(nn.Sequential(nn.Conv1d(512, 512, 5, padding=2), nn.BatchNorm1d(512)) for _ in range(3))
        self.lstm = nn.LSTM(512, 256, batch_first=True, bidirectional=True)

    def forward(self, x):
        x = self.emb(x).transpose(1, 2)
        for c in self.convs:
            x = F.dropout(F.relu(c(x)), 0.5, self.training)
        return self.lstm(x.transpose(1, 2))[0]


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(1024, 128, bias=False)
        self.memory = nn.Linear(512, 128, bias=False)
        self.loc_conv = nn.Conv1d(2, 32, 31, padding=15, bias=False)
        self.loc_dense = nn.Linear(32, 128, bias=False)
        self.v = nn.Linear(128, 1, bias=False)

    def forward(self, q, pmem, mem, cat_w, mask):
        loc = self.loc_dense(self.loc_conv(cat_w).transpose(1, 2))
        e = self.v(torch.tanh(self.query(q)[:, None] + loc + pmem)).squeeze(-1)
        w = F.softmax(e.masked_fill(~mask, float("-inf")), dim=1)
        return torch.bmm(w[:, None], mem).squeeze(1), w


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre1 = nn.Linear(MEL * R, 256)
        self.pre2 = nn.Linear(256, 256)
        self.att_rnn = nn.LSTMCell(256 + 512, 1024)
        self.att = Attention()
        self.dec_rnn = nn.LSTMCell(1024 + 512, 1024)
        self.proj = nn.Linear(1024 + 512, MEL * R)
        self.gate = nn.Linear(1024 + 512, 1)

    def prenet(self, x):  # dropout always on
        return F.dropout(F.relu(self.pre2(F.dropout(F.relu(self.pre1(x)), 0.5, True))), 0.5, True)

    def forward(self, mem, mask, mels, steps):
        b, t, _ = mem.shape
        pmem = self.att.memory(mem)
        z = mem.new_zeros
        ah, ac, dh, dc = z(b, 1024), z(b, 1024), z(b, 1024), z(b, 1024)
        ctx, w, w_cum = z(b, 512), z(b, t), z(b, t)
        frame = z(b, MEL * R)
        outs, gates, aligns = [], [], []
        for i in range(steps):
            x = self.prenet(frame)
            ah, ac = self.att_rnn(torch.cat([x, ctx], 1), (ah, ac))
            ah = F.dropout(ah, 0.1, self.training)
            ctx, w = self.att(ah, pmem, mem, torch.stack([w, w_cum], 1), mask)
            w_cum = w_cum + w
            dh, dc = self.dec_rnn(torch.cat([ah, ctx], 1), (dh, dc))
            dh = F.dropout(dh, 0.1, self.training)
            hc = torch.cat([dh, ctx], 1)
            out = self.proj(hc)
            outs.append(out)
            gates.append(self.gate(hc))
            aligns.append(w)
            frame = mels[:, i] if mels is not None else out
        mel = torch.stack(outs, 1).view(b, steps * R, MEL)
        return mel, torch.cat(gates, 1), torch.stack(aligns, 1)


class Tacotron2(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Encoder()
        self.dec = Decoder()
        ch = [MEL, 512, 512, 512, 512, MEL]
        self.post = nn.ModuleList(nn.Sequential(nn.Conv1d(ch[i], ch[i + 1], 5, padding=2), nn.BatchNorm1d(ch[i + 1])) for i in range(5))

    def forward(self, txt, mask, mels, steps):
        mem = self.enc(txt)
        tf = None
        if mels is not None:  # teacher forcing: previous reduced frame, first one zeros
            tf = mels.reshape(mels.shape[0], steps, MEL * R)
            tf = torch.cat([tf.new_zeros(tf.shape[0], 1, MEL * R), tf[:, :-1]], 1)
        mel, gate, align = self.dec(mem, mask, tf, steps)
        y = mel.transpose(1, 2)
        for i, c in enumerate(self.post):
            y = c(y)
            if i < 4:
                y = F.dropout(torch.tanh(y), 0.5, self.training)
        return mel, mel + y.transpose(1, 2), gate, align


def batch(b, t_mel):
    txt = torch.randint(1, VOCAB, (b, T_TXT), device=device)
    lens = torch.randint(T_TXT // 2, T_TXT + 1, (b,), device=device)
    lens[0] = T_TXT
    mask = torch.arange(T_TXT, device=device)[None] < lens[:, None]
    mels = torch.randn(b, t_mel, MEL, device=device)
    stop = torch.zeros(b, t_mel // R, device=device)
    stop[:, -1] = 1
    return txt, mask, mels, stop


model = Tacotron2().to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-6)
print("params", sum(p.numel() for p in model.parameters()))


def train_step(dtype=None):
    txt, mask, mels, stop = batch(B, T_MEL)
    with torch.autocast(device, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        mel, post, gate, _ = model(txt, mask, mels, T_MEL // R)
    loss = F.mse_loss(mel.float(), mels) + F.mse_loss(post.float(), mels) + F.binary_cross_entropy_with_logits(gate.float(), stop)
    opt.zero_grad()
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item(), gn.item()


for step in range(2):
    print("step", step, *train_step())
report("train_fp32")

model.eval()
with torch.inference_mode():
    txt, mask, _, _ = batch(B // 2, 2)
    mel, post, gate, align = model(txt, mask, None, 160 if not SMALL else 8)
    print("synth", tuple(post.shape), torch.sigmoid(gate).mean().item(), align.shape)
    del mel, post, gate, align
report("inference_fixed_frames")

model.train()
for step in range(2):
    print("bf16 step", step, *train_step(torch.bfloat16))
report("train_bf16_autocast")
