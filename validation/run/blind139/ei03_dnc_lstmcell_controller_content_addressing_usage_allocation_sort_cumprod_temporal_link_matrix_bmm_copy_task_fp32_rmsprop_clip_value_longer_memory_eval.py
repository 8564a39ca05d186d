"""Differentiable Neural Computer (Graves et al. 2016) written by hand after DeepMind's
addressing.py: an nn.LSTMCell controller (256 wide, fed the input and the previous 4 reads) stepped
in a Python loop, the interface vector split into keys, strengths, erase/write vectors, free and
allocation gates and read modes; content addressing by cosine similarity (normalised bmm, softmax
over slots), usage with retention, the allocation weighting by torch.sort of the usage and an
exclusive cumprod scattered back, erase/add writes as outer products, the N x N temporal link matrix
with its precedence and zeroed diagonal, forward/backward weightings by bmm, reads by bmm; the copy
task (random 8-bit vectors, a delimiter channel, 20 steps in and 20 out, BCE-with-logits on the
output half); fp32 (TF32 off), batch 64, 512 slots of 64, RMSprop (momentum 0.9, eps 1e-10),
clip_grad_value_ 10; 3 steps; then evaluation under no_grad on 40-long sequences at batch 128 and
on a 1,024-slot memory with 60-long sequences (the memory is no parameter); 6 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13903)
B, N, W, R, H, T = (4, 16, 8, 2, 32, 4) if SMALL else (64, 512, 64, 4, 256, 20)
EB, ET, GB, GN, GT = (4, 6, 2, 32, 8) if SMALL else (128, 40, 32, 1024, 60)
BITS = 8
EPS = 1e-6
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False


def content_weights(memory, keys, strengths):
    mem_n = memory / (memory.norm(dim=2, keepdim=True) + EPS)
    keys_n = keys / (keys.norm(dim=2, keepdim=True) + EPS)
    sim = torch.bmm(keys_n, mem_n.transpose(1, 2))
    return F.softmax(sim * strengths.unsqueeze(-1), dim=-1)


def allocation(usage):
    usage = EPS + (1 - EPS) * usage
    sorted_usage, indices = torch.sort(usage, dim=1)
    prod = torch.cumprod(sorted_usage, dim=1)
    prod = torch.cat([torch.ones_like(prod[:, :1]), prod[:, :-1]], dim=1)
    sorted_alloc = (1 - sorted_usage) * prod
    return torch.zeros_like(usage).scatter(1, indices, sorted_alloc)


class DNC(nn.Module):
    def __init__(self, inp, out):
        super().__init__()
        self.iface_sizes = [R * W, R, W, 1, W, W, R, 1, 1, 3 * R]
        self.controller = nn.LSTMCell(inp + R * W, H)
        self.interface = nn.Linear(H, sum(self.iface_sizes))
        self.output = nn.Linear(H + R * W, out)

    def init_state(self, b, n, dev):
        z = torch.zeros
        return dict(
            h=z(b, H, device=dev),
            c=z(b, H, device=dev),
            memory=z(b, n, W, device=dev),
            usage=z(b, n, device=dev),
            link=z(b, n, n, device=dev),
            precedence=z(b, n, device=dev),
            read_w=z(b, R, n, device=dev),
            write_w=z(b, n, device=dev),
            reads=z(b, R * W, device=dev),
        )

    def step(self, x, s):
        b, n = s["usage"].shape
        h, c = self.controller(torch.cat([x, s["reads"]], dim=1), (s["h"], s["c"]))
        parts = torch.split(self.interface(h), self.iface_sizes, dim=1)
        read_keys = parts[0].view(b, R, W)
        read_str = 1 + F.softplus(parts[1])
        write_key = parts[2].view(b, 1, W)
        write_str = 1 + F.softplus(parts[3])
        erase = torch.sigmoid(parts[4])
        write_vec = parts[5]
        free_gates = torch.sigmoid(parts[6])
        alloc_gate = torch.sigmoid(parts[7])
        write_gate = torch.sigmoid(parts[8])
        modes = F.softmax(parts[9].view(b, R, 3), dim=-1)

        retention = torch.prod(1 - free_gates.unsqueeze(-1) * s["read_w"], dim=1)
        usage = (s["usage"] + s["write_w"] - s["usage"] * s["write_w"]) * retention
        write_content = content_weights(s["memory"], write_key, write_str).squeeze(1)
        write_w = write_gate * (alloc_gate * allocation(usage) + (1 - alloc_gate) * write_content)

        memory = s["memory"] * (1 - torch.bmm(write_w.unsqueeze(2), erase.unsqueeze(1)))
        memory = memory + torch.bmm(write_w.unsqueeze(2), write_vec.unsqueeze(1))

        link = (1 - write_w.unsqueeze(2) - write_w.unsqueeze(1)) * s["link"]
        link = link + write_w.unsqueeze(2) * s["precedence"].unsqueeze(1)
        link = link * (1 - torch.eye(n, device=link.device)).unsqueeze(0)
        precedence = (1 - write_w.sum(dim=1, keepdim=True)) * s["precedence"] + write_w

        forward_w = torch.bmm(s["read_w"], link.transpose(1, 2))
        backward_w = torch.bmm(s["read_w"], link)
        read_content = content_weights(memory, read_keys, read_str)
        read_w = (
            modes[:, :, 0:1] * backward_w + modes[:, :, 1:2] * read_content + modes[:, :, 2:3] * forward_w
        )
        reads = torch.bmm(read_w, memory).view(b, R * W)
        y = self.output(torch.cat([h, reads], dim=1))
        return y, dict(
            h=h,
            c=c,
            memory=memory,
            usage=usage,
            link=link,
            precedence=precedence,
            read_w=read_w,
            write_w=write_w,
            reads=reads,
        )

    def forward(self, xs, n):
        s = self.init_state(xs.shape[1], n, xs.device)
        ys = []
        for t in range(xs.shape[0]):
            y, s = self.step(xs[t], s)
            ys.append(y)
        return torch.stack(ys)


def copy_task(b, t):
    seq = torch.randint(0, 2, (t, b, BITS), device=device).float()
    inp = torch.zeros(2 * t + 1, b, BITS + 1, device=device)
    inp[:t, :, :BITS] = seq
    inp[t, :, BITS] = 1.0
    return inp, seq


model = DNC(BITS + 1, BITS).to(device)
optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-4, momentum=0.9, eps=1e-10)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    inp, target = copy_task(B, T)
    out = model(inp, N)
    loss = F.binary_cross_entropy_with_logits(out[T + 1 :], target)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 10.0)
    optimizer.step()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del out, loss
model.eval()
with torch.no_grad():
    inp, target = copy_task(EB, ET)
    bits = ((model(inp, N)[ET + 1 :] > 0).float() != target).float().sum(dim=(0, 2)).mean()
if device == "cuda":
    print(
        f"eval bit errors {bits.item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    inp, target = copy_task(GB, GT)
    bits = ((model(inp, GN)[GT + 1 :] > 0).float() != target).float().sum(dim=(0, 2)).mean()
if device == "cuda":
    print(
        f"1024-slot bit errors {bits.item():.2f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
