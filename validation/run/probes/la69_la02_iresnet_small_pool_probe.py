"""Probe for blind312/la02 (i-ResNet flow, fp32): with main 82aa53dc's cuDNN table la02 is exact in
allocated and peaks, but from its training phase the twin holds one 2 MiB segment more than the H100
(reserved +2,097,152). This runs la02 up to its training loop (its own code) and then the loop's 6 steps
itself, printing after every stage of every step the small and large pools' allocated bytes and segments
and the active blocks, so the stage where the segment counts part shows.
Run: python3 probes/la69_la02_iresnet_small_pool_probe.py (from validation/run); < 20 s, < 7 GB."""

import pathlib

import torch

here = pathlib.Path(__file__).resolve().parent.parent
src = next((here / "blind312").glob("la02_*.py"))
g = {"__name__": "la02", "__file__": str(src)}
exec(compile(src.read_text().split("\nmodel.train()\n")[0], str(src), "exec"), g)
model, optimizer, images, batch_size = g["model"], g["optimizer"], g["images"], g["batch_size"]
preprocess, bits_per_dim = g["preprocess"], g["bits_per_dim"]


def line(tag):
    s = torch.cuda.memory_stats()
    print(
        f"{tag}: small {s['allocated_bytes.small_pool.current']} / {s['segment.small_pool.current']} seg, "
        f"large {s['allocated_bytes.large_pool.current']} / {s['segment.large_pool.current']} seg, "
        f"active {s['active.all.current']}"
    )


line("built")
model.train()
for step in range(6):
    idx = torch.randint(0, images.shape[0], (batch_size,), device="cuda")
    x, ld_pre = preprocess(images[idx])
    line(f"step {step} data")
    z, logdet = model(x, n_terms=5)
    loss = bits_per_dim(z, logdet + ld_pre)
    line(f"step {step} forward")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    line(f"step {step} backward")
    torch.nn.utils.clip_grad_norm_(model.parameters(), 100.0)
    line(f"step {step} clip")
    optimizer.step()
    line(f"step {step} step")
del x, z, logdet, loss
line("done")
