"""CRNN after Shi et al. 2015 ("An End-to-End Trainable Neural Network for Image-based Sequence
Recognition") and the meijieru/crnn.pytorch repository, written by hand: a VGG-style backbone of 7
convolutions (64, 128, 256, 256, 512, 512, 512 channels; BatchNorm after the 3rd, 5th and 7th as the
repository's `leakyRelu=False, batchNormalization` variant does; max pools 2x2, 2x2, (2,1) and (2,1)
with their paddings) over 32 x 100 grayscale text lines, the height squeezed to 1 and the width (26
columns) the sequence, then two BidirectionalLSTM blocks (nn.LSTM(512, 256, bidirectional) + Linear) to
37 classes (blank + 0-9 + a-z); log_softmax and F.ctc_loss with padded (B, 24) int64 targets and
per-sample lengths drawn on the host and moved to the device with the input lengths (F.ctc_loss divides
the losses by them for the mean, on the losses' device), `zero_infinity=True`. fp32, Adadelta (lr 1.0,
as the paper), batch 512: the first step its own phase, then 4 steps; validation of 4 batches of 1,024
under no_grad with greedy CTC decoding (argmax over classes, a fixed-shape collapse mask); then a
wider-line variant (32 x 256 images, 64 columns, 3 BiLSTM layers of 384 in one nn.LSTM, targets of 48)
trained under bf16 autocast with AdamW (lr 3e-4) and gradient clipping, 3 steps at batch 256, the loss
in fp32; 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18001)
gen = torch.Generator().manual_seed(18001)
if SMALL:
    B, STEPS, EVAL_B, EVAL_N, WIDE_B, NH = 4, 2, 4, 1, 2, 32
else:
    B, STEPS, EVAL_B, EVAL_N, WIDE_B, NH = 512, 5, 1024, 4, 256, 256
NCLASS = 37
MAX_LABEL = 24
device = "cuda" if torch.cuda.is_available() else "cpu"


class BidirectionalLSTM(nn.Module):
    def __init__(self, n_in, n_hidden, n_out):
        super().__init__()
        self.rnn = nn.LSTM(n_in, n_hidden, bidirectional=True)
        self.embedding = nn.Linear(n_hidden * 2, n_out)

    def forward(self, x):
        recurrent, _ = self.rnn(x)
        T, b, h = recurrent.size()
        out = self.embedding(recurrent.view(T * b, h))
        return out.view(T, b, -1)


def vgg_backbone(nc=1):
    ks = [3, 3, 3, 3, 3, 3, 2]
    ps = [1, 1, 1, 1, 1, 1, 0]
    nm = [64, 128, 256, 256, 512, 512, 512]
    cnn = nn.Sequential()

    def conv_relu(i, bn=False):
        n_in = nc if i == 0 else nm[i - 1]
        cnn.add_module(f"conv{i}", nn.Conv2d(n_in, nm[i], ks[i], 1, ps[i]))
        if bn:
            cnn.add_module(f"batchnorm{i}", nn.BatchNorm2d(nm[i]))
        cnn.add_module(f"relu{i}", nn.ReLU(True))

    conv_relu(0)
    cnn.add_module("pooling0", nn.MaxPool2d(2, 2))
    conv_relu(1)
    cnn.add_module("pooling1", nn.MaxPool2d(2, 2))
    conv_relu(2, True)
    conv_relu(3)
    cnn.add_module("pooling2", nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
    conv_relu(4, True)
    conv_relu(5)
    cnn.add_module("pooling3", nn.MaxPool2d((2, 2), (2, 1), (0, 1)))
    conv_relu(6, True)
    return cnn


class CRNN(nn.Module):
    def __init__(self, nh, nclass, layers=2):
        super().__init__()
        self.cnn = vgg_backbone()
        if layers == 2:
            self.rnn = nn.Sequential(BidirectionalLSTM(512, nh, nh), BidirectionalLSTM(nh, nh, nclass))
        else:
            self.rnn = nn.LSTM(512, nh, num_layers=layers, bidirectional=True, dropout=0.1)
            self.fc = nn.Linear(2 * nh, nclass)
        self.layers = layers

    def forward(self, x):
        conv = self.cnn(x)
        _b, _c, h, _w = conv.size()
        assert h == 1, "the height of conv must be 1"
        conv = conv.squeeze(2).permute(2, 0, 1)  # [w, b, c]
        if self.layers == 2:
            return self.rnn(conv)
        out, _ = self.rnn(conv)
        return self.fc(out)


def text_batch(bs, width, max_label):
    images = torch.rand(bs, 1, 32, width, device=device) * 2 - 1
    lengths = torch.randint(4, max_label + 1, (bs,), generator=gen)
    targets = torch.randint(1, NCLASS, (bs, max_label), generator=gen)
    return images, targets.to(device), lengths.to(device)


def greedy_decode(log_probs):
    best = log_probs.argmax(dim=2).t()  # [b, T]
    keep = torch.ones_like(best, dtype=torch.bool)
    keep[:, 1:] = best[:, 1:] != best[:, :-1]
    keep &= best != 0
    return best * keep, keep.sum(dim=1)


model = CRNN(NH, NCLASS).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.Adadelta(model.parameters(), lr=1.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    images, targets, target_lengths = text_batch(B, 100, MAX_LABEL)
    preds = model(images)  # [T, b, nclass]
    log_probs = preds.log_softmax(2)
    input_lengths = torch.full((B,), preds.size(0), dtype=torch.long, device=device)
    loss = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=True)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f} T {preds.size(0)}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del images, targets, preds, log_probs, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
n_chars, total_loss = 0, 0.0
with torch.no_grad():
    for _ in range(EVAL_N):
        images, targets, target_lengths = text_batch(EVAL_B, 100, MAX_LABEL)
        log_probs = model(images).log_softmax(2)
        input_lengths = torch.full((EVAL_B,), log_probs.size(0), dtype=torch.long, device=device)
        total_loss += F.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True).item()
        decoded, dec_lengths = greedy_decode(log_probs)
        n_chars += int(dec_lengths.sum())
print(f"val loss {total_loss / EVAL_N:.4f} decoded chars {n_chars}")
del images, targets, log_probs, decoded, dec_lengths
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del model, optimizer
wide = CRNN(NH + NH // 2, NCLASS, layers=3).to(device)
wide_opt = torch.optim.AdamW(wide.parameters(), lr=3e-4, weight_decay=0.01)
wide.train()
for step in range(3):
    images, targets, target_lengths = text_batch(WIDE_B, 256, 48)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        preds = wide(images)
    log_probs = preds.float().log_softmax(2)
    input_lengths = torch.full((WIDE_B,), preds.size(0), dtype=torch.long, device=device)
    loss = F.ctc_loss(log_probs, targets, input_lengths, target_lengths, zero_infinity=True)
    wide_opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(wide.parameters(), 5.0)
    wide_opt.step()
    print(f"wide step {step} loss {loss.item():.4f} T {preds.size(0)}")
if device == "cuda":
    print(
        f"wide allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
