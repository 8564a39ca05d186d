"""A small CTC speech recognizer over variable-length log-mel features, kept as Python lists of tensors
the way a collate-free loader would hand them over: a Conv1d + BatchNorm1d + GELU frontend (stride 2) on
the pad_sequence'd batch, the frames cut back into per-utterance tensors with
torch.nn.utils.rnn.unpad_sequence, re-packed with pack_sequence(enforce_sorted=False) for a 3-layer
bidirectional GRU, unpacked with unpack_sequence, re-padded and scored with F.ctc_loss over
(T, N, C) log-probabilities. Trained in fp32 with AdamW and StepLR, then in fp16 autocast
with a GradScaler and clip_grad_norm_ after unscale_, then evaluated with the frontend's Conv1d and
BatchNorm1d folded into one convolution by torch.nn.utils.fusion.fuse_conv_bn_eval (a deepcopy of the
model, BatchNorm replaced by Identity) under inference_mode with greedy (argmax) decoding.

Phases: 0 data (48 utterances, 300-1,600 frames, 80 mels) and model; 1 fp32 training (6 steps);
2 fp16 autocast + GradScaler training (6 steps); 3 fused-frontend inference and greedy decode;
4 eval-mode CTC loss of the fused model against the unfused one."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.fusion import fuse_conv_bn_eval
from torch.nn.utils.rnn import pack_sequence, pad_sequence, unpack_sequence, unpad_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3255)
device = "cuda" if torch.cuda.is_available() else "cpu"
NU, TMIN, TMAX, MEL, H, VOC = (6, 40, 120, 16, 32, 12) if SMALL else (48, 300, 1600, 80, 512, 32)
MB = 3 if SMALL else 16

lengths = torch.randint(TMIN, TMAX + 1, (NU,)).tolist()
target_lengths = [max(4, n // 16) for n in lengths]
feats = [torch.randn(n, MEL, device=device) for n in lengths]
targets = [torch.randint(1, VOC, (m,), device=device) for m in target_lengths]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Recognizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(MEL, H, kernel_size=5, stride=2, padding=2)
        self.bn = nn.BatchNorm1d(H)
        self.rnn = nn.GRU(H, H, num_layers=3, bidirectional=True, dropout=0.1)
        self.out = nn.Linear(2 * H, VOC)

    def forward(self, seqs):
        lens = torch.tensor([s.shape[0] for s in seqs])
        x = pad_sequence(seqs, batch_first=True).transpose(1, 2)  # N, MEL, T
        x = F.gelu(self.bn(self.conv(x))).transpose(1, 2)  # N, T', H
        out_lens = (lens + 2 * 2 - 5) // 2 + 1
        frames = unpad_sequence(x, out_lens, batch_first=True)
        packed = pack_sequence(frames, enforce_sorted=False)
        y, _ = self.rnn(packed)
        per_utt = unpack_sequence(y)
        logits = self.out(pad_sequence(per_utt))  # T', N, VOC
        return logits.log_softmax(-1), out_lens


def ctc(model, lo, hi):
    logp, out_lens = model(feats[lo:hi])
    tg = torch.cat(targets[lo:hi])
    return F.ctc_loss(logp.float(), tg, out_lens, torch.tensor(target_lengths[lo:hi]), zero_infinity=True)


model = Recognizer().to(device)
report("data")

# 1: fp32 training
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-2)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.5)
for step in range(6):
    lo = (step * MB) % NU
    opt.zero_grad(set_to_none=True)
    loss = ctc(model, lo, lo + MB)
    loss.backward()
    opt.step()
    sched.step()
print(f"fp32 ctc loss {loss.item():.4f}")
report("fp32_train")

# 2: fp16 autocast with GradScaler
scaler = torch.amp.GradScaler(device)
for step in range(6):
    lo = (step * MB) % NU
    opt.zero_grad(set_to_none=True)
    with torch.autocast(device_type=device, dtype=torch.float16):
        loss = ctc(model, lo, lo + MB)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 5.0)
    scaler.step(opt)
    scaler.update()
print(f"fp16 ctc loss {loss.item():.4f}")
del opt, sched, scaler, loss
report("fp16_train")

# 3: fold BatchNorm into the conv for inference, greedy decode
model.eval()
fused = copy.deepcopy(model)
fused.conv = fuse_conv_bn_eval(fused.conv, fused.bn)
fused.bn = nn.Identity()
with torch.inference_mode():
    hyp_tokens = 0
    for lo in range(0, NU, MB):
        logp, out_lens = fused(feats[lo : lo + MB])
        best = logp.argmax(-1)  # T', N
        keep = (best != 0) & (best != torch.roll(best, 1, dims=0))
        hyp_tokens += keep.sum().item()
print(f"greedy decode kept {hyp_tokens} tokens")
report("fused_decode")

# 4: eval CTC of fused vs unfused
with torch.no_grad():
    a = sum(ctc(model, lo, lo + MB).item() for lo in range(0, NU, MB))
    b = sum(ctc(fused, lo, lo + MB).item() for lo in range(0, NU, MB))
print(f"eval ctc unfused {a:.4f} fused {b:.4f}")
report("fused_vs_unfused")
