"""DeepSpeech 2 written from the paper: a 2-D convolutional front end (two conv2d+BN+hardtanh
layers striding time and frequency) over padded log spectrograms, 5 bidirectional GRU layers with
sequence-wise batch norm between them (sum of directions, packed by the true lengths with
pack_padded_sequence), a lookahead-free linear CTC head over 29 characters; CTC loss over padded
targets and per-utterance lengths, fp16 autocast with GradScaler, SGD with Nesterov momentum,
3 training steps on batches of different longest lengths, then greedy decoding under
inference_mode; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12103)
B = 4 if SMALL else 32
FRAMES = [120, 160, 100] if SMALL else [700, 1000, 850]
N_FREQ, HID, LAYERS, VOCAB = 161, (128 if SMALL else 1024), (2 if SMALL else 5), 29
device = "cuda" if torch.cuda.is_available() else "cpu"


class BatchRNN(nn.Module):
    def __init__(self, d_in, bn=True):
        super().__init__()
        self.bn = nn.BatchNorm1d(d_in) if bn else None
        self.rnn = nn.GRU(d_in, HID, bidirectional=True, bias=True)

    def forward(self, x, lengths):
        if self.bn is not None:
            t, n = x.shape[:2]
            x = self.bn(x.view(t * n, -1)).view(t, n, -1)
        x = pack_padded_sequence(x, lengths, enforce_sorted=False)
        x, _ = self.rnn(x)
        x, _ = pad_packed_sequence(x)
        return x.view(x.size(0), x.size(1), 2, -1).sum(2)


class DeepSpeech2(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, 32, (41, 11), stride=(2, 2), padding=(20, 5)),
            nn.BatchNorm2d(32),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(32, 32, (21, 11), stride=(2, 1), padding=(10, 5)),
            nn.BatchNorm2d(32),
            nn.Hardtanh(0, 20, inplace=True),
        )
        f = (N_FREQ + 2 * 20 - 41) // 2 + 1
        f = (f + 2 * 10 - 21) // 2 + 1
        self.rnns = nn.ModuleList([BatchRNN(32 * f, bn=False)] + [BatchRNN(HID) for _ in range(LAYERS - 1)])
        self.head = nn.Sequential(nn.BatchNorm1d(HID), nn.Linear(HID, VOCAB, bias=False))

    def forward(self, spec, lengths):
        x = self.conv(spec.unsqueeze(1))
        out_lens = (lengths + 2 * 5 - 11) // 2 + 1
        n, c, f, t = x.shape
        x = x.view(n, c * f, t).permute(2, 0, 1).contiguous()
        for rnn in self.rnns:
            x = rnn(x, out_lens.cpu())
        t, n, h = x.shape
        x = self.head(x.view(t * n, h)).view(t, n, -1)
        return x, out_lens


model = DeepSpeech2().to(device)
opt = torch.optim.SGD(model.parameters(), lr=3e-4, momentum=0.9, nesterov=True, weight_decay=1e-5)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")


def batch(longest):
    lengths = torch.randint(longest // 2, longest + 1, (B,))
    lengths[0] = longest
    spec = torch.randn(B, N_FREQ, longest, device=device)
    spec = spec * (torch.arange(longest, device=device)[None, None] < lengths.to(device)[:, None, None])
    tgt_lens = torch.randint(longest // 16, longest // 8, (B,))
    targets = torch.randint(1, VOCAB, (B, int(tgt_lens.max())), device=device)
    return spec, lengths.to(device), targets, tgt_lens.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step, longest in enumerate(FRAMES):
    spec, lengths, targets, tgt_lens = batch(longest)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        logits, out_lens = model(spec, lengths)
        log_probs = logits.log_softmax(-1)
        loss = F.ctc_loss(log_probs, targets, out_lens, tgt_lens, blank=0, zero_infinity=True)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 400)
    scaler.step(opt)
    scaler.update()
    if device == "cuda":
        print(
            f"step {step} T {longest} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del spec, logits, log_probs, loss
model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    spec, lengths, _, _ = batch(FRAMES[1])
    logits, out_lens = model(spec, lengths)
    best = logits.argmax(-1).t()
    keep = torch.ones_like(best, dtype=torch.bool)
    keep[:, 1:] = best[:, 1:] != best[:, :-1]
    keep &= best != 0
    n_chars = keep.sum(1)
if device == "cuda":
    print(
        f"decode chars {int(n_chars.sum())} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
