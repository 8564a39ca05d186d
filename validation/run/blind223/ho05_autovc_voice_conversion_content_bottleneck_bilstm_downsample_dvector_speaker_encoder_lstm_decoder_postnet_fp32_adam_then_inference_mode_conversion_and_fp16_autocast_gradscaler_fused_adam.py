"""AutoVC-style zero-shot voice conversion: a d-vector speaker encoder (3-layer LSTM 768 over 80-bin mels,
a 256 projection, L2-normalised mean over time; frozen, under no_grad, as in the paper), a content encoder
(the mel concatenated with the speaker embedding broadcast over time, 3 conv1d-BN-ReLU 512 layers, a
2-layer bidirectional LSTM with a 32-dim bottleneck per direction, down-sampled by 16 by taking the forward
output at frames 15, 31, ... and the backward at 0, 16, ..., then up-sampled by repeat_interleave), a
decoder (codes + target speaker embedding, an LSTM 512, 3 conv1d-BN-ReLU 512, a 2-layer LSTM 1024, a linear
to 80 bins) and a 5-layer conv1d postnet.

Loss: self-reconstruction MSE before and after the postnet + the content-code consistency L1 (the
reconstruction re-encoded). fp32 Adam (lr 1e-4) at batch 64, 384 frames. Phases: 3 training steps;
conversion under inference_mode at batch 128 (source content, another speaker's embedding); 3 steps under
fp16 autocast with GradScaler and fused Adam. 3 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2235)
device = "cuda" if torch.cuda.is_available() else "cpu"
B, T = (2, 32) if SMALL else (64, 384)
MEL, EMB, NECK, FREQ = 80, 256, 32, 16


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
              f"reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def conv_bn(cin, cout):
    return nn.Sequential(nn.Conv1d(cin, cout, 5, padding=2), nn.BatchNorm1d(cout), nn.ReLU())


class SpeakerEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(MEL, 768, num_layers=3, batch_first=True)
        self.proj = nn.Linear(768, EMB)

    def forward(self, mel):  # [B, T, MEL]
        return F.normalize(F.relu(self.proj(self.lstm(mel)[0])).mean(1), dim=1)


class ContentEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.Sequential(conv_bn(MEL + EMB, 512), conv_bn(512, 512), conv_bn(512, 512))
        self.lstm = nn.LSTM(512, NECK, num_layers=2, batch_first=True, bidirectional=True)

    def forward(self, mel, emb):
        x = torch.cat([mel, emb[:, None].expand(-1, mel.shape[1], -1)], -1)
        x = self.convs(x.transpose(1, 2)).transpose(1, 2)
        out = self.lstm(x)[0]
        fwd, bwd = out[:, :, :NECK], out[:, :, NECK:]
        return torch.cat([fwd[:, FREQ - 1::FREQ], bwd[:, ::FREQ]], -1)  # [B, T/16, 64]


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTM(2 * NECK + EMB, 512, batch_first=True)
        self.convs = nn.Sequential(conv_bn(512, 512), conv_bn(512, 512), conv_bn(512, 512))
        self.lstm2 = nn.LSTM(512, 1024, num_layers=2, batch_first=True)
        self.out = nn.Linear(1024, MEL)
        ch = [MEL, 512, 512, 512, 512, MEL]
        self.post = nn.ModuleList(nn.Sequential(nn.Conv1d(ch[i], ch[i + 1], 5, padding=2), nn.BatchNorm1d(ch[i + 1])) for i in range(5))

    def forward(self, codes, emb):
        up = torch.repeat_interleave(codes, FREQ, dim=1)
        x = torch.cat([up, emb[:, None].expand(-1, up.shape[1], -1)], -1)
        x = self.lstm1(x)[0]
        x = self.convs(x.transpose(1, 2)).transpose(1, 2)
        mel = self.out(self.lstm2(x)[0])
        y = mel.transpose(1, 2)
        for i, c in enumerate(self.post):
            y = c(y)
            if i < 4:
                y = torch.tanh(y)
        return mel, mel + y.transpose(1, 2)


spk_enc = SpeakerEncoder().to(device).eval().requires_grad_(False)
content = ContentEncoder().to(device)
dec = Decoder().to(device)
params = list(content.parameters()) + list(dec.parameters())
opt = torch.optim.Adam(params, lr=1e-4)
print("params", sum(p.numel() for p in params))


def train_step(scaler=None):
    mel = torch.randn(B, T, MEL, device=device)
    with torch.no_grad():
        emb = spk_enc(mel)
    with torch.autocast(device, dtype=torch.float16, enabled=scaler is not None):
        codes = content(mel, emb)
        rec, rec_post = dec(codes, emb)
        codes_rec = content(rec_post, emb)
    loss = F.mse_loss(rec.float(), mel) + F.mse_loss(rec_post.float(), mel) + F.l1_loss(codes_rec.float(), codes.float())
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss.item()


for i in range(3):
    print("step", i, train_step())
report("train_fp32_adam")

content.eval()
dec.eval()
with torch.inference_mode():
    src = torch.randn(2 * B, T, MEL, device=device)
    ref = torch.randn(2 * B, T, MEL, device=device)
    e_src, e_tgt = spk_enc(src), spk_enc(ref)
    _, converted = dec(content(src, e_src), e_tgt)
    print("converted", tuple(converted.shape), converted.abs().mean().item())
    del converted, src, ref
report("conversion_inference_mode")

content.train()
dec.train()
opt = torch.optim.Adam(params, lr=1e-4, fused=device == "cuda")
scaler = torch.amp.GradScaler(device)
for i in range(3):
    print("fp16 step", i, train_step(scaler))
report("train_fp16_fused_adam")
