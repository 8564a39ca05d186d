"""Probe for blind312/la03 (VRNN, fp16 autocast + GradScaler): the H100 ends la03's training phase with
one 2 MiB segment (reserved -2,097,152 in the twin) more than the twin, allocated and peaks exact. This
runs la03 up to its training loop (its own code) and then the loop's 5 steps itself, printing after every
stage of every step the small and large pools' allocated bytes and segments and the active blocks, so the
stage where the extra segment appears shows. Run: python3 probes/la69_la03_vrnn_small_pool_probe.py (from
validation/run); < 15 s, < 2 GB."""

import pathlib

import torch
import torch.nn as nn

here = pathlib.Path(__file__).resolve().parent.parent
src = next((here / "blind312").glob("la03_*.py"))
g = {"__name__": "la03", "__file__": str(src)}
exec(compile(src.read_text().split("\nmodel.train()\n")[0], str(src), "exec"), g)
model, ema, optimizer, scaler = g["model"], g["ema"], g["optimizer"], g["scaler"]
train_rolls, batch_size = g["train_rolls"], g["batch_size"]


def line(tag):
    s = torch.cuda.memory_stats()
    print(
        f"{tag}: small {s['allocated_bytes.small_pool.current']} / {s['segment.small_pool.current']} seg, "
        f"large {s['allocated_bytes.large_pool.current']} / {s['segment.large_pool.current']} seg, "
        f"active {s['active.all.current']}"
    )


line("built")
model.train()
for step in range(5):
    idx = torch.randint(0, train_rolls.shape[1], (batch_size,), device="cuda")
    x = train_rolls[:, idx]
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        kld_loss, nll_loss = model(x)
        loss = (kld_loss + nll_loss) / batch_size
    line(f"step {step} forward")
    scaler.scale(loss).backward()
    line(f"step {step} backward")
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), 10.0)
    line(f"step {step} unscale clip")
    scaler.step(optimizer)
    scaler.update()
    line(f"step {step} step update")
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters(), strict=True):
            e.mul_(0.995).add_(p.detach(), alpha=0.005)
    print(f"step {step} scale {scaler.get_scale()} kld {kld_loss.item():.1f}")
    line(f"step {step} ema")
