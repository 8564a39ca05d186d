"""ZeRO-Offload in miniature: a bf16 GPT trains on the GPU while its fp32 master weights and the AdamW
state live on the host, under `PYTORCH_CUDA_ALLOC_CONF="pinned_use_cuda_host_register:True,
pinned_num_register_threads:4,release_lock_on_cudamalloc:True,max_split_size_mb:64"` set in `os.environ`
before torch is imported (pinned host memory by `malloc` + `cudaHostRegister` on 4 threads, and blocks over
64 MB never split).

The model: a hand-written GPT (6 blocks, d 768, 12 heads, SDPA causal, GELU MLP, pre-LayerNorm, untied
16,384-way head), its parameters in bf16 on the GPU. Every parameter has a pinned fp32 master copy on the
host (`torch.empty(..., pin_memory=True)`), a pinned bf16 gradient buffer and a pinned bf16 staging buffer.
After backward, a copy stream waits for the compute stream (`wait_stream`) and copies every gradient to its
pinned buffer with `non_blocking=True`; an event recorded there is synchronized, the GPU gradients are dropped
(`grad = None`), and `torch.optim.AdamW` (foreach) steps the fp32 masters on the CPU; the new weights are cast
to the bf16 staging buffers and copied back on the copy stream (`non_blocking=True`), the compute stream
waiting for it before the next forward.

Phases: set-up (model on the GPU, pinned buffers); 4 offloaded steps at batch 8 x 512; no_grad evaluation
at batch 16 x 1,024 with the logits' log-softmax; `empty_cache()` then 3 steps with 2 micro-batches of
12 x 512 accumulated on the GPU before the offload. 4 phases. No value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = (
    "pinned_use_cuda_host_register:True,pinned_num_register_threads:4,"
    "release_lock_on_cudamalloc:True,max_split_size_mb:64"
)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(3021)
VOCAB, D, HEADS, LAYERS = 16384, 768, 12, 6
dev = torch.device("cuda")


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(1024, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln, self.head = nn.LayerNorm(D), nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = GPT().to(dev, torch.bfloat16)
params = list(model.parameters())
masters = []
for p in params:
    m = torch.empty(p.shape, dtype=torch.float32, pin_memory=True)
    m.copy_(p.detach().float())
    m.requires_grad_(True)
    masters.append(m)
grad_bufs = [torch.empty(p.shape, dtype=torch.bfloat16, pin_memory=True) for p in params]
stage_bufs = [torch.empty(p.shape, dtype=torch.bfloat16, pin_memory=True) for p in params]
opt = torch.optim.AdamW(masters, lr=3e-4, weight_decay=0.1, foreach=True)
copy_stream = torch.cuda.Stream()
print(
    f"params {sum(p.numel() for p in params)} host pinned {torch.cuda.host_memory_stats().get('allocated_bytes.current', 0)}"
)
report("set-up")


def offload_step():
    compute = torch.cuda.current_stream()
    copy_stream.wait_stream(compute)
    with torch.cuda.stream(copy_stream):
        for p, g in zip(params, grad_bufs):
            g.copy_(p.grad, non_blocking=True)
    done = copy_stream.record_event()
    done.synchronize()
    for p, m, g in zip(params, masters, grad_bufs):
        p.grad = None
        m.grad = g.float()
    torch.nn.utils.clip_grad_norm_(masters, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        for m, s in zip(masters, stage_bufs):
            s.copy_(m)
    with torch.cuda.stream(copy_stream):
        for p, s in zip(params, stage_bufs):
            p.data.copy_(s, non_blocking=True)
    compute.wait_stream(copy_stream)


def batch(b, t):
    x = torch.randint(0, VOCAB, (b, t + 1)).pin_memory().to(dev, non_blocking=True)
    return x[:, :-1], x[:, 1:]


for step in range(4):
    x, y = batch(8, 512)
    loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten())
    loss.backward()
    offload_step()
    print(f"step {step} loss {loss.item():.4f}")
    del x, y, loss
report("offloaded steps")

with torch.no_grad():
    x, y = batch(16, 1024)
    logp = F.log_softmax(model(x).float(), dim=-1)
    nll = -logp.gather(-1, y.unsqueeze(-1)).mean()
    print(f"eval nll {nll.item():.4f}")
    del x, y, logp, nll
report("evaluation")

torch.cuda.empty_cache()
for step in range(3):
    for micro in range(2):
        x, y = batch(12, 512)
        loss = F.cross_entropy(model(x).flatten(0, 1).float(), y.flatten()) / 2
        loss.backward()
        del x, y
    offload_step()
    print(f"accum step {step} loss {loss.item():.4f}")
    del loss
report("accumulated offloaded steps")
