"""FastSpeech 2 text-to-mel training written by hand, on random phonemes, durations, pitch, energy and mels.

Encoder and mel decoder: 6 FFT blocks each (d 384, nn.MultiheadAttention with 2 heads, batch_first, a
boolean key_padding_mask and need_weights=False; a Conv1d FFN of kernel 9 and 1536 channels; post-norm
LayerNorms), sinusoidal positions. Variance adaptor: duration, pitch and energy predictors (two Conv1d of
kernel 3 with ReLU, LayerNorm and dropout, then a Linear); pitch and energy quantised into 256 bins by
torch.bucketize and embedded (ground truth in training). Length regulator: each mel frame's phoneme found
by torch.searchsorted over the cumulative durations and gathered (frames past an utterance's length
masked). Postnet: 5 Conv1d of 512 channels, kernel 5, BatchNorm1d and tanh (Tacotron 2's).

Data: 48 utterances of 40 to 150 phonemes with 1 to 12 frames each (host-drawn; the padded mel length is
the host's maximum), 80 mel bins. Loss: masked L1 of the mel before and after the postnet (masked_select),
MSE of log durations and of pitch and energy over valid phonemes.

Phases: the first step (fp32, Adam betas 0.9/0.98, eps 1e-9, the Noam schedule by LambdaLR, clipping 1.0);
3 more steps; inference under inference_mode from predicted durations (round(exp(d) - 1), at least 1)
into a fixed budget of 6 frames per phoneme slot, predicted pitch and energy bucketized; then a variant
under bf16 autocast with fused AdamW and 2-way gradient accumulation of 24 utterances, 3 updates. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2055)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    D, LAYERS, HEADS, FILTER, BATCH, MIN_N, MAX_N, MAX_D = 32, 1, 2, 64, 3, 5, 12, 4
else:
    D, LAYERS, HEADS, FILTER, BATCH, MIN_N, MAX_N, MAX_D = 384, 6, 2, 1536, 48, 40, 150, 12
N_MELS, N_PHONES, BINS, BUDGET = 80, 80, 256, 6


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def sinusoid_table(n, d):
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    table = torch.zeros(n, d)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table


class FFTBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, dropout=0.1, batch_first=True)
        self.norm1 = nn.LayerNorm(D)
        self.conv1 = nn.Conv1d(D, FILTER, 9, padding=4)
        self.conv2 = nn.Conv1d(FILTER, D, 1)
        self.norm2 = nn.LayerNorm(D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, pad):
        a, _ = self.attn(x, x, x, key_padding_mask=pad, need_weights=False)
        x = self.norm1(x + self.drop(a)).masked_fill(pad.unsqueeze(-1), 0.0)
        y = self.conv2(F.relu(self.conv1(x.transpose(1, 2)))).transpose(1, 2)
        return self.norm2(x + self.drop(y)).masked_fill(pad.unsqueeze(-1), 0.0)


class VariancePredictor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(D, 256, 3, padding=1)
        self.norm1 = nn.LayerNorm(256)
        self.conv2 = nn.Conv1d(256, 256, 3, padding=1)
        self.norm2 = nn.LayerNorm(256)
        self.out = nn.Linear(256, 1)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, pad):
        y = self.drop(self.norm1(F.relu(self.conv1(x.transpose(1, 2))).transpose(1, 2)))
        y = self.drop(self.norm2(F.relu(self.conv2(y.transpose(1, 2))).transpose(1, 2)))
        return self.out(y).squeeze(-1).masked_fill(pad, 0.0)


class FastSpeech2(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(N_PHONES, D, padding_idx=0)
        self.register_buffer("pos", sinusoid_table(4000, D), persistent=False)
        self.encoder = nn.ModuleList(FFTBlock() for _ in range(LAYERS))
        self.duration = VariancePredictor()
        self.pitch = VariancePredictor()
        self.energy = VariancePredictor()
        self.register_buffer("pitch_bins", torch.linspace(-3.0, 3.0, BINS - 1), persistent=False)
        self.register_buffer("energy_bins", torch.linspace(-3.0, 3.0, BINS - 1), persistent=False)
        self.pitch_embed = nn.Embedding(BINS, D)
        self.energy_embed = nn.Embedding(BINS, D)
        self.decoder = nn.ModuleList(FFTBlock() for _ in range(LAYERS))
        self.mel = nn.Linear(D, N_MELS)
        chans = [N_MELS, 512, 512, 512, 512, N_MELS]
        self.postnet = nn.ModuleList(
            nn.Sequential(nn.Conv1d(chans[i], chans[i + 1], 5, padding=2), nn.BatchNorm1d(chans[i + 1]))
            for i in range(5)
        )

    def regulate(self, h, durations, n_frames):
        cum = durations.cumsum(dim=1)
        frames = torch.arange(n_frames, device=h.device).expand(h.shape[0], n_frames).contiguous()
        idx = torch.searchsorted(cum, frames, right=True).clamp(max=h.shape[1] - 1)
        mel_pad = frames >= cum[:, -1:]
        return h.gather(1, idx.unsqueeze(-1).expand(-1, -1, D)), mel_pad

    def forward(self, phones, durations=None, pitch=None, energy=None, n_frames=None):
        pad = phones == 0
        x = self.embed(phones) + self.pos[: phones.shape[1]]
        for blk in self.encoder:
            x = blk(x, pad)
        log_d = self.duration(x, pad)
        p_pred = self.pitch(x, pad)
        e_pred = self.energy(x, pad)
        if durations is None:
            durations = torch.clamp(torch.round(torch.exp(log_d) - 1.0), min=1).long().masked_fill(pad, 0)
            pitch, energy = p_pred, e_pred
        x = x + self.pitch_embed(torch.bucketize(pitch, self.pitch_bins))
        x = x + self.energy_embed(torch.bucketize(energy, self.energy_bins))
        h, mel_pad = self.regulate(x, durations, n_frames)
        h = h + self.pos[:n_frames]
        for blk in self.decoder:
            h = blk(h, mel_pad)
        mel = self.mel(h)
        y = mel.transpose(1, 2)
        for i, layer in enumerate(self.postnet):
            y = layer(y)
            if i < 4:
                y = torch.tanh(y)
            y = F.dropout(y, 0.5, self.training)
        return mel, mel + y.transpose(1, 2), log_d, p_pred, e_pred, mel_pad


def make_batch(batch):
    n = torch.randint(MIN_N, MAX_N + 1, (batch,))
    n[0] = MAX_N
    valid = torch.arange(MAX_N)[None] < n[:, None]
    phones = torch.randint(1, N_PHONES, (batch, MAX_N)) * valid
    durations = torch.randint(1, MAX_D + 1, (batch, MAX_N)) * valid
    n_frames = int(durations.sum(1).max())
    mel_valid = torch.arange(n_frames)[None] < durations.sum(1)[:, None]
    mels = torch.randn(batch, n_frames, N_MELS) * mel_valid.unsqueeze(-1)
    pitch = torch.randn(batch, MAX_N) * valid
    energy = torch.randn(batch, MAX_N) * valid
    to = lambda t: t.to(device)  # noqa: E731
    return to(phones), to(durations), to(pitch), to(energy), to(mels), n_frames


def tts_loss(batch):
    phones, durations, pitch, energy, mels, n_frames = batch
    mel, post, log_d, p_pred, e_pred, mel_pad = model(phones, durations, pitch, energy, n_frames)
    keep = ~mel_pad.unsqueeze(-1)
    target = mels.masked_select(keep)
    mel_loss = F.l1_loss(mel.masked_select(keep), target) + F.l1_loss(post.masked_select(keep), target)
    valid = phones != 0
    d_loss = F.mse_loss(log_d[valid], torch.log(durations.float() + 1.0)[valid])
    var_loss = F.mse_loss(p_pred[valid], pitch[valid]) + F.mse_loss(e_pred[valid], energy[valid])
    return mel_loss + d_loss + var_loss


model = FastSpeech2().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: D**-0.5 * min((s + 1) ** -0.5, (s + 1) * 4000**-1.5))


def fp32_step():
    loss = tts_loss(make_batch(BATCH))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


model.train()
print(f"step 0 loss {fp32_step():.4f}")
report("first step")
for _ in range(3):
    loss = fp32_step()
print(f"step 3 loss {loss:.4f}")
report("train fp32")

model.eval()
with torch.inference_mode():
    phones = make_batch(BATCH)[0]
    mel, post, log_d, _, _, mel_pad = model(phones, n_frames=BUDGET * phones.shape[1])
    print(f"inference mel {tuple(post.shape)} frames used {(~mel_pad).sum().item()}")
report("inference")

del opt, sched
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, betas=(0.9, 0.98), weight_decay=0.01, fused=amp)
model.train()
for step in range(3):
    for micro in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = tts_loss(make_batch(BATCH // 2)) / 2
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"bf16 update {step} loss {loss.item() * 2:.4f}")
report("bf16 accumulation")
