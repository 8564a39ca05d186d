"""Memory-saving training tricks from the PyTorch tutorials, on a 12-layer GPT-style stack (d 1024,
16 heads, MLP 4096, vocabulary 8,192, context 1,024, ~160M parameters), batch 8 x 1,024.

1. Plain reference: fused AdamW, bf16 autocast, `zero_grad(set_to_none=True)`, 2 steps.
2. Optimizer in backward ("How to save memory by fusing the optimizer step into the backward pass"):
   one AdamW (foreach=False) per parameter, stepped and zeroed from
   `Tensor.register_post_accumulate_grad_hook`, so each gradient is freed as soon as it is used;
   the first optimizer's states are dropped beforehand. 3 steps.
3. Activation packing with `torch.autograd.graph.saved_tensors_hooks`: every saved floating tensor
   of more than 1 Mi elements is stored as float8_e4m3fn with a per-tensor amax scale (a 0-dim fp32
   tensor) and restored to its dtype when backward unpacks it; parameters pass through unchanged.
   Still with the per-parameter optimizers in backward. 2 steps.
4. Input prefetch on a side stream: the next batch's token ids are copied from pinned host memory
   on a `torch.cuda.Stream`, the main stream waits on it, and `record_stream` marks the tensors as
   used there; 3 steps with fp8 packing and the hooks still on.
Phases: model, reference step, optimizer-in-backward, fp8 saved tensors, prefetch stream. 5 phases."""


import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2405)
device = "cuda"
V, D, H, NL, T, B = 8192, 1024, 16, 12, 1024, 8


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.out = nn.Linear(4 * D, D)

    def forward(self, x):
        q, k, v = self.attn(self.ln1(x)).split(D, dim=-1)
        q, k, v = (t.view(x.shape[0], T, H, D // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(x.shape))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList([Block() for _ in range(NL)])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.wte.weight = self.head.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def step_loss(idx):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(idx[:, :-1])
    return F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1))


with torch.device(device):  # built on the GPU, not on the host first
    model = GPT()
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
for step in range(2):
    idx = torch.randint(0, V, (B, T + 1), device=device)
    loss = step_loss(idx)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"reference step {step} loss {loss.item():.3f}")
del idx, loss, opt
report("reference fused adamw bf16")

per_param = {p: torch.optim.AdamW([p], lr=3e-4, weight_decay=0.1, foreach=False) for p in model.parameters()}


def step_in_backward(p):
    per_param[p].step()
    per_param[p].zero_grad(set_to_none=True)


handles = [p.register_post_accumulate_grad_hook(step_in_backward) for p in model.parameters()]
for step in range(3):
    idx = torch.randint(0, V, (B, T + 1), device=device)
    loss = step_loss(idx)
    loss.backward()
    print(f"optimizer-in-backward step {step} loss {loss.item():.3f}")
del idx, loss
report("optimizer in backward hooks")

params = {p.untyped_storage().data_ptr() for p in model.parameters()}
E4M3_MAX = torch.finfo(torch.float8_e4m3fn).max


def pack(t):
    if not t.is_floating_point() or t.numel() < (1 << 20) or t.untyped_storage().data_ptr() in params:
        return t
    scale = t.detach().abs().amax().float().clamp(min=1e-12) / E4M3_MAX
    return (t.dtype, (t.detach() / scale).to(torch.float8_e4m3fn), scale)


def unpack(packed):
    if isinstance(packed, torch.Tensor):
        return packed
    dtype, q, scale = packed
    return (q.to(torch.float32) * scale).to(dtype)


for step in range(2):
    idx = torch.randint(0, V, (B, T + 1), device=device)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = step_loss(idx)
    loss.backward()
    print(f"fp8-packed step {step} loss {loss.item():.3f}")
del idx, loss
report("fp8 e4m3 saved tensors")

side = torch.cuda.Stream()
host = [torch.randint(0, V, (B, T + 1)).pin_memory() for _ in range(4)]
with torch.cuda.stream(side):
    nxt = host[0].to(device, non_blocking=True)
for step in range(3):
    torch.cuda.current_stream().wait_stream(side)
    idx = nxt
    idx.record_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        nxt = host[step + 1].to(device, non_blocking=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        loss = step_loss(idx)
    loss.backward()
    print(f"prefetch step {step} loss {loss.item():.3f}")
torch.cuda.synchronize()
del idx, nxt, loss
report("side stream prefetch record_stream")
