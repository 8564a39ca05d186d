"""A CTC acoustic model over fixed-length utterances as a hand-written speech recogniser writes
it: 80-bin log-mel features of 16 s (1,600 frames), a Conv1d front end (kernel 11, stride 2,
80 -> 384 channels, BatchNorm1d, ReLU), four time-channel separable Conv1d blocks in QuartzNet's
manner (a depthwise Conv1d of kernel 13..25 then a pointwise 1 x 1, BatchNorm1d, a residual 1 x 1
projection, ReLU, dropout 0.1), then a 2-layer unidirectional nn.LSTM of 1,024 units (batch_first)
and a linear layer to 29 characters plus the blank; F.ctc_loss on the log-softmax (time first)
with every input length 800 and every target 120 characters, (batch, 120) targets, reduction
"mean", zero_infinity; bf16 autocast, Adam with amsgrad (lr 3e-4), clip_grad_norm_ at 1.0, batch
48, 4 steps; then greedy CTC decoding of 128 utterances under inference_mode (argmax, repeats
collapsed with unique_consecutive per utterance on the host); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15006)
MEL, CH, HID, NCLS, B, FRAMES, TLEN, STEPS, EB = (
    (16, 32, 32, 30, 4, 160, 12, 2, 4) if SMALL else (80, 384, 1024, 30, 48, 1600, 120, 4, 128)
)
device = "cuda" if torch.cuda.is_available() else "cpu"


class SeparableBlock(nn.Module):
    def __init__(self, cin, cout, k):
        super().__init__()
        self.dw = nn.Conv1d(cin, cin, k, padding=k // 2, groups=cin, bias=False)
        self.pw = nn.Conv1d(cin, cout, 1, bias=False)
        self.bn = nn.BatchNorm1d(cout)
        self.res = nn.Sequential(nn.Conv1d(cin, cout, 1, bias=False), nn.BatchNorm1d(cout))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(F.relu(self.bn(self.pw(self.dw(x))) + self.res(x)))


class AcousticModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.front = nn.Sequential(
            nn.Conv1d(MEL, CH, 11, stride=2, padding=5, bias=False), nn.BatchNorm1d(CH), nn.ReLU()
        )
        self.blocks = nn.Sequential(*[SeparableBlock(CH, CH, k) for k in (13, 17, 21, 25)])
        self.lstm = nn.LSTM(CH, HID, num_layers=2, batch_first=True, dropout=0.1)
        self.out = nn.Linear(HID, NCLS)

    def forward(self, feats):  # (batch, mel, frames)
        x = self.blocks(self.front(feats))
        x, _ = self.lstm(x.transpose(1, 2))
        return self.out(x)  # (batch, frames // 2, classes)


model = AcousticModel().to(device)
opt = torch.optim.Adam(model.parameters(), lr=3e-4, amsgrad=True)
ctc = nn.CTCLoss(blank=0, reduction="mean", zero_infinity=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
T_OUT = FRAMES // 2
for step in range(STEPS):
    feats = torch.randn(B, MEL, FRAMES, device=device)
    targets = torch.randint(1, NCLS, (B, TLEN), device=device)
    input_lengths = torch.full((B,), T_OUT, dtype=torch.long, device=device)
    target_lengths = torch.full((B,), TLEN, dtype=torch.long, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        logits = model(feats)
        log_probs = logits.float().log_softmax(-1).transpose(0, 1)  # (T, B, C)
        loss = ctc(log_probs, targets, input_lengths, target_lengths)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} ctc {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del logits, log_probs, loss, feats
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    feats = torch.randn(EB, MEL, FRAMES, device=device)
    best = model(feats).argmax(-1).cpu()
hyps = [[c for c in torch.unique_consecutive(row).tolist() if c != 0] for row in best]
if device == "cuda":
    print(
        f"decoded {len(hyps)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
