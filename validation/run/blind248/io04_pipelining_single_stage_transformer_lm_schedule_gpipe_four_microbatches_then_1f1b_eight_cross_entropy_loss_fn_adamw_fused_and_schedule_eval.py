"""torch.distributed.pipelining with a single stage on one GPU (the same program later runs over several
stages): a pre-norm Transformer language model (`nn.TransformerEncoderLayer` x 6, d 1024, 16 heads,
ffn 4096, GELU, batch_first, causal mask; vocab 32000, tied nothing) built on the GPU as stage 0 of 1
(`PipelineStage(model, 0, 1, device)`), a cross-entropy `loss_fn`; AdamW (fused). 2 steps of
`ScheduleGPipe` with 4 micro-batches of a batch 16 x 512; then 2 steps of `Schedule1F1B` with 8
micro-batches of the same batch over a new stage of the same model; then `ScheduleGPipe.eval` of one
batch (forward only, the losses returned). Process group: init_process_group('nccl') with rank 0 of 1
and MASTER_ADDR/PORT set by the script. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")

torch.manual_seed(2484)
V, D, H, FF, L, T, B = 32000, 1024, 16, 4096, 6, 512, 16
device = torch.device("cuda", 0)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                D, H, FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
            )
            for _ in range(L)
        )
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        x = self.emb(idx)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


def loss_fn(logits, target):
    return F.cross_entropy(logits.view(-1, V), target.view(-1))


model = LM().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, fused=True)
x = torch.randint(0, V, (B, T), device=device)
y = torch.randint(0, V, (B, T), device=device)
report("setup")

gpipe = ScheduleGPipe(PipelineStage(model, 0, 1, device), n_microbatches=4, loss_fn=loss_fn)
for _ in range(2):
    losses = []
    gpipe.step(x, target=y, losses=losses)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del losses
report("gpipe_4_microbatches")

one_f_one_b = Schedule1F1B(PipelineStage(model, 0, 1, device), n_microbatches=8, loss_fn=loss_fn)
for _ in range(2):
    losses = []
    one_f_one_b.step(x, target=y, losses=losses)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del losses
report("1f1b_8_microbatches")

with torch.no_grad():
    losses = []
    out = gpipe.eval(x, target=y, losses=losses)
    n = len(losses)
    del out, losses
report("gpipe_eval")
print("eval micro-batches", n)

dist.destroy_process_group()
