"""Probe for blind312/la05 (SampleRNN): with main 82aa53dc's cuDNN table (the set's convolutions swept) la05
is exact in allocated, but from its training phase the twin reserves 123,731,968 bytes more than the H100
(phase 1's peak 163,840 under; its three GRU workspaces are unmeasured, see la69_la05_gru_workspace_probe.py).
This runs la05's model and one batch of its TBPTT
loop (4 chunks, bf16 autocast, Adam, clip_grad_value_, lerp_ EMA) and prints, after every stage of every
chunk, memory_allocated and the number of active blocks; then which parameters hold a .grad, and
the optimizer state's block count. Run: python3 probes/la69_la05_samplernn_step_probe.py (from
validation/run); < 10 s, < 3 GB."""

import copy
import pathlib
import sys

import torch
import torch.nn.functional as F

here = pathlib.Path(__file__).resolve().parent.parent
src = next((here / "blind312").glob("la05_*.py"))
text = src.read_text()
# the script's definitions only (everything before the model is built)
defs = text.split("model = SampleRNN().to(device)")[0]
mod = type(sys)("la05defs")
exec(compile(defs, str(src), "exec"), mod.__dict__)
SampleRNN, q_levels, make_waves = mod.SampleRNN, mod.q_levels, mod.make_waves

torch.manual_seed(7)


def line(tag):
    s = torch.cuda.memory_stats()
    print(
        f"{tag}: allocated {torch.cuda.memory_allocated()} active_blocks {s['active.all.current']} "
        f"reserved {torch.cuda.memory_reserved()}"
    )


model = SampleRNN().to("cuda")
ema = copy.deepcopy(model).requires_grad_(False)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
seq_len, chunk, lookback = 4096, 1024, model.lookback
batch = make_waves(64, seq_len + lookback)
line("built")
hidden = {}
for c in range(seq_len // chunk):
    inputs = batch[:, c * chunk : c * chunk + chunk + lookback - 1]
    targets = batch[:, c * chunk + lookback : c * chunk + chunk + lookback]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        log_probs, hidden = model(inputs, hidden)
        loss = F.nll_loss(log_probs.view(-1, q_levels).float(), targets.reshape(-1))
    line(f"chunk {c} forward")
    hidden = {k: h.detach() for k, h in hidden.items()}
    optimizer.zero_grad()
    line(f"chunk {c} zero_grad")
    loss.backward()
    line(f"chunk {c} backward")
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    line(f"chunk {c} clip")
    optimizer.step()
    line(f"chunk {c} step")
    with torch.no_grad():
        for e, p in zip(ema.parameters(), model.parameters(), strict=True):
            e.lerp_(p, 1 - 0.999)
    line(f"chunk {c} ema")
    del log_probs, loss
    line(f"chunk {c} end")
print("grads None:", [n for n, p in model.named_parameters() if p.grad is None])
print(
    "grad bytes:",
    sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None),
)
print(
    "state tensors on cuda:",
    sum(
        1 for st in optimizer.state.values() for v in st.values() if isinstance(v, torch.Tensor) and v.is_cuda
    ),
)
del hidden
line("done")
