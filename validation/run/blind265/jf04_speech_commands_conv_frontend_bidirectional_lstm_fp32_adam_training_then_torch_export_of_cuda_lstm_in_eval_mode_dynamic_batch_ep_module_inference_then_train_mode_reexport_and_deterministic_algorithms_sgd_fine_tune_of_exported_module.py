"""Exporting a recurrent model on the GPU, which PyTorch 2.11 made possible (`torch.export` of
`nn.LSTM` on CUDA tensors: `_ignore_backend_decomps` turns cuDNN off while tracing, and the graph
keeps `aten.lstm.input`, run by cuDNN again at run time). A keyword-spotting model over 40-band
log-mel frames: a Conv1d front-end (40 -> 256 -> 256, stride 2, BatchNorm, ReLU), a 2-layer
bidirectional LSTM of hidden 512 (batch_first, dropout 0.1), attention pooling over time and a
35-way classifier, fp32. Phase 1: 6 Adam steps at batch 64 x 400 frames (cuDNN's RNN, training).
Phase 2: the model in eval mode exported with `torch.export.export(model, (x,),
dynamic_shapes={"x": {0: Dim("batch", max=256)}})` from a CUDA example input (the frame count stays
static: tracing the LSTM without cuDNN specializes it), then `ep.module()` run under
`torch.inference_mode()` at batches 16, 128 and 64 of 400 frames. Phase 3: an exported module
from an eval-mode export bakes `train=False` into its LSTM call, and cuDNN refuses a backward
through it ("cudnn RNN backward can only be called in training mode"), so the model is exported
again in training mode and that module fine-tuned for 4 SGD steps at batch 32 x 400 frames under
`torch.use_deterministic_algorithms(True)` (CUBLAS_WORKSPACE_CONFIG=:4096:8 set by the script before
any CUDA call). Fixed sizes throughout. 3 phases."""

import os

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"

import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

torch.manual_seed(2654)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class KWS(nn.Module):
    def __init__(self, mels=40, ch=256, hidden=512, classes=35):
        super().__init__()
        self.front = nn.Sequential(
            nn.Conv1d(mels, ch, 5, padding=2),
            nn.BatchNorm1d(ch),
            nn.ReLU(),
            nn.Conv1d(ch, ch, 5, stride=2, padding=2),
            nn.BatchNorm1d(ch),
            nn.ReLU(),
        )
        self.lstm = nn.LSTM(ch, hidden, num_layers=2, batch_first=True, bidirectional=True, dropout=0.1)
        self.att = nn.Linear(2 * hidden, 1)
        self.cls = nn.Linear(2 * hidden, classes)

    def forward(self, x):  # x: (B, mels, frames)
        h = self.front(x).transpose(1, 2)
        h, _ = self.lstm(h)
        w = torch.softmax(self.att(h).squeeze(-1), dim=1)
        return self.cls((w.unsqueeze(-1) * h).sum(1))


FRAMES = 400
model = KWS().to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _step in range(6):
    x = torch.randn(64, 40, FRAMES, device=dev)
    y = torch.randint(0, 35, (64,), device=dev)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("train", round(loss.item(), 3))
report("train_cudnn_lstm_fp32")

del opt, loss
model.eval()
dyn = {"x": {0: Dim("batch", max=256)}}
ep = torch.export.export(model, (torch.randn(8, 40, FRAMES, device=dev),), dynamic_shapes=dyn)
print(len(ep.graph.nodes), "nodes")
served = ep.module()
with torch.inference_mode():
    for b in (16, 128, 64):
        out = served(torch.randn(b, 40, FRAMES, device=dev))
        print(b, tuple(out.shape))
report("exported_lstm_inference_three_batches")

del served, ep, out
model.train()
ep_train = torch.export.export(model, (torch.randn(8, 40, FRAMES, device=dev),), dynamic_shapes=dyn)
tuned = ep_train.module()
torch.use_deterministic_algorithms(True)
opt = torch.optim.SGD(tuned.parameters(), lr=1e-2, momentum=0.9)
for _step in range(4):
    x = torch.randn(32, 40, FRAMES, device=dev)
    y = torch.randint(0, 35, (32,), device=dev)
    loss = F.cross_entropy(tuned(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("fine-tune", round(loss.item(), 3))
report("train_mode_export_deterministic_sgd")
