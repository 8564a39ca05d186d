"""An ensemble of four MLP scorers (shared trunk, fp32 weights, bf16 autocast) served concurrently:
`CUBLAS_WORKSPACE_CONFIG=":4096:2:16:8"` (two entries: 2 x 4 MiB and 8 x 16 KiB, summed by PyTorch into
one workspace per cuBLAS handle and stream) is set before torch is imported; the trunk runs on the
default stream, then three heads run on their own side streams created with different priorities
(`torch.cuda.Stream(priority=-1)`, `priority=0`, and a default one), each after
`s.wait_stream(current)`, with the trunk's output marked `record_stream(s)` for each; the main stream
joins them with `wait_stream` before averaging. The last head runs on the default stream. Then the
ensemble is trained on the default stream only (AdamW), then `torch.cuda.empty_cache()` and another
round of concurrent scoring at a larger batch.

Phases: 0 models built; 1 concurrent scoring on three side streams (two batches); 2 three training
steps on the default stream; 3 `empty_cache()`, concurrent scoring at a larger batch."""

import os

os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:2:16:8"

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3332)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    IN, D, HID, NH, BATCHES, BIG = 32, 64, 128, 4, [8, 12], 16
else:
    IN, D, HID, NH, BATCHES, BIG = 1024, 2048, 8192, 4, [4096, 6144], 16384


def mlp(i, h, o):
    return nn.Sequential(nn.Linear(i, h), nn.GELU(), nn.LayerNorm(h), nn.Linear(h, o))


trunk = mlp(IN, HID, D).to(device)
heads = nn.ModuleList(mlp(D, HID, 1) for _ in range(NH)).to(device)
params = list(trunk.parameters()) + list(heads.parameters())
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
if device == "cuda":
    streams = [torch.cuda.Stream(priority=-1), torch.cuda.Stream(priority=0), torch.cuda.Stream()]
else:
    streams = [None, None, None]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def score(x):
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
        z = trunk(x)
        outs = []
        if device == "cuda":
            main = torch.cuda.current_stream()
            for head, s in zip(heads, streams, strict=False):
                s.wait_stream(main)
                z.record_stream(s)
                with torch.cuda.stream(s):
                    outs.append(head(z).float())
            outs.append(heads[-1](z).float())
            for s, o in zip(streams, outs, strict=False):
                main.wait_stream(s)
                o.record_stream(main)
        else:
            outs = [head(z).float() for head in heads]
        return torch.stack(outs).mean(0).squeeze(-1)


report("phase0 built")

for b in BATCHES:
    x = torch.randn(b, IN, device=device)
    print("score", b, round(score(x).sum().item(), 3))
    del x
report("phase1 concurrent scoring")

for step in range(3):
    x = torch.randn(BATCHES[0], IN, device=device)
    y = torch.randn(BATCHES[0], device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        z = trunk(x)
        preds = torch.stack([h(z).float().squeeze(-1) for h in heads])
    loss = F.mse_loss(preds, y.expand_as(preds))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print("train", step, round(loss.item(), 4))
del x, y, z, preds, loss
report("phase2 training")

if device == "cuda":
    torch.cuda.empty_cache()
x = torch.randn(BIG, IN, device=device)
print("score", BIG, round(score(x).sum().item(), 3))
del x
report("phase3 empty_cache then larger batch")
