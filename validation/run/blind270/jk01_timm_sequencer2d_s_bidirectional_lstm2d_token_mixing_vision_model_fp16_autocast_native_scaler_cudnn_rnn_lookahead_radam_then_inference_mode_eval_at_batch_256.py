"""timm's Sequencer2D-S (Tatsunami & Taki 2022): a vision model whose token mixers are bidirectional
LSTMs run along the rows and along the columns of the feature map (`LSTM2d`: the (B, H, W, C) map
reshaped to B*H sequences of length W and B*W sequences of length H, each through a bidirectional
`nn.LSTM` of hidden 48 / 96 / 96 / 96, concatenated and fused by a linear), so every block is two cuDNN
RNN calls. `timm.create_model("sequencer2d_s", pretrained=False, drop_path_rate=0.1)` (random
weights), fp16 autocast (the LSTMs take cuDNN's half RNN) with timm's `NativeScaler` (GradScaler,
norm clipping at 1.0 after unscale) and the `lookahead_radam` optimizer from
`timm.optim.create_optimizer_v2` (RAdam wrapped by Lookahead: slow weights kept beside the fast ones,
synced every 6 steps), label-smoothed cross entropy. Phase 1: 7 steps at batch 48 x 3 x 224 x 224.
Phase 2: inference_mode evaluation in fp16 autocast at batch 256, top-1 against random labels.
Seeded. 2 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.utils import NativeScaler

torch.manual_seed(2701)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("sequencer2d_s", pretrained=False, num_classes=1000, drop_path_rate=0.1).to(dev)
optimizer = create_optimizer_v2(model, opt="lookahead_radam", lr=1e-3, weight_decay=0.05)
loss_scaler = NativeScaler()
model.train()
for _step in range(7):
    x = torch.randn(48, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (48,), device=dev)
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=0.1)
    optimizer.zero_grad(set_to_none=True)
    loss_scaler(loss, optimizer, clip_grad=1.0, clip_mode="norm", parameters=model.parameters())
print("train", _step + 1, round(loss.item(), 3), loss_scaler.state_dict()["scale"])
report("sequencer2d_s_fp16_lstm2d_lookahead_radam_b48")

del x, y, logits, loss
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16):
    for _b in range(2):
        x = torch.randn(256, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (256,), device=dev)
        correct += (model(x).argmax(-1) == y).sum().item()
print("top1", correct / 512)
report("sequencer2d_s_inference_mode_fp16_b256")
