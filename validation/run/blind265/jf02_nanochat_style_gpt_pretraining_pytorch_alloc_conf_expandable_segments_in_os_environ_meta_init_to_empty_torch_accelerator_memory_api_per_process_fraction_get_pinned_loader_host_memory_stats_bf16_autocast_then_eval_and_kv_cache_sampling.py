"""A single-file GPT pretraining script in the style of nanochat / autoresearch (PyTorch 2.9+ idioms):
`os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"` set before `import torch` (the 2.9
name of PYTORCH_CUDA_ALLOC_CONF, read when the allocator starts), the device picked with
`torch.accelerator.current_accelerator()`, the model built on the meta device and materialized with
`to_empty(device=...)` and an explicit `init_weights()`, a 0.5 memory fraction set with
`torch.cuda.memory.set_per_process_memory_fraction` and read back with
`get_per_process_memory_fraction`, memory reported by the generic `torch.accelerator` API
(`max_memory_allocated`, `memory_reserved`, `get_memory_info`, `memory_stats`,
`reset_accumulated_memory_stats`) and the pinned host buffers of the loader by
`torch.cuda.host_memory_stats()`. The GPT: 12 layers of d 1,024 (8 heads of 128, RoPE, QK RMSNorm,
ReLU^2 MLP of 4,096, untied head, vocabulary 50,304), bf16 autocast, fused AdamW for matrices and
embeddings in two groups, batch 16 x 1,024 from a pinned ring of 2 host buffers copied non_blocking,
10 steps with 2 micro-steps each; then no_grad evaluation over 4 batches with
`torch.accelerator.empty_cache()` before it; then sampling 128 tokens for 8 prompts of 64 tokens from
a preallocated bf16 KV cache under `torch.inference_mode()`. Fixed sizes throughout. 4 phases."""

import os

os.environ["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2652)
device = torch.accelerator.current_accelerator()
assert device.type == "cuda"
torch.cuda.memory.set_per_process_memory_fraction(0.5)
print("fraction", torch.cuda.memory.get_per_process_memory_fraction())


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    free, total = torch.accelerator.get_memory_info()
    stats = torch.accelerator.memory_stats()
    print(
        f"  accelerator: max {torch.accelerator.max_memory_allocated()} reserved "
        f"{torch.accelerator.memory_reserved()} free {free} of {total} "
        f"allocs {stats.get('allocation.all.allocated', 0)} segments {stats.get('segment.all.allocated', 0)}"
    )
    torch.cuda.reset_peak_memory_stats()


VOCAB, D, LAYERS, HEADS, MLP, SEQ, B = 50304, 1024, 12, 8, 4096, 1024, 16
HD = D // HEADS


def rotary(seq, base=10000.0):
    inv = 1.0 / base ** (torch.arange(0, HD, 2, dtype=torch.float32, device=device) / HD)
    f = torch.outer(torch.arange(seq, dtype=torch.float32, device=device), inv)
    return f.cos().bfloat16()[None, :, None, :], f.sin().bfloat16()[None, :, None, :]


def apply_rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos + x2 * sin, x2 * cos - x1 * sin], dim=-1)


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(D, D, bias=False)
        self.k = nn.Linear(D, D, bias=False)
        self.v = nn.Linear(D, D, bias=False)
        self.o = nn.Linear(D, D, bias=False)

    def forward(self, x, cos, sin, cache=None, pos=0):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, HEADS, HD)
        k = self.k(x).view(b, t, HEADS, HD)
        v = self.v(x).view(b, t, HEADS, HD)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        q, k = F.rms_norm(q, (HD,)), F.rms_norm(k, (HD,))
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            kc, vc = cache
            kc[:, :, pos : pos + t] = k
            vc[:, :, pos : pos + t] = v
            k, v = kc[:, :, : pos + t], vc[:, :, : pos + t]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
        return self.o(y.transpose(1, 2).reshape(b, t, D))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()
        self.fc = nn.Linear(D, MLP, bias=False)
        self.proj = nn.Linear(MLP, D, bias=False)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.attn(F.rms_norm(x, (D,)), cos, sin, cache, pos)
        return x + self.proj(F.relu(self.fc(F.rms_norm(x, (D,)))).square())


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    @torch.no_grad()
    def init_weights(self):
        nn.init.normal_(self.wte.weight, std=1.0)
        nn.init.normal_(self.lm_head.weight, std=0.001)
        for blk in self.blocks:
            for lin in (blk.attn.q, blk.attn.k, blk.attn.v, blk.fc):
                nn.init.uniform_(lin.weight, -(3**0.5) * D**-0.5, (3**0.5) * D**-0.5)
            nn.init.zeros_(blk.attn.o.weight)
            nn.init.zeros_(blk.proj.weight)
        self.cos, self.sin = rotary(SEQ * 2)
        self.wte.to(dtype=torch.bfloat16)

    def forward(self, idx, targets=None, caches=None, pos=0):
        t = idx.shape[1]
        cos, sin = self.cos[:, pos : pos + t], self.sin[:, pos : pos + t]
        x = F.rms_norm(self.wte(idx), (D,))
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, None if caches is None else caches[i], pos)
        logits = self.lm_head(F.rms_norm(x, (D,))).float()
        logits = 15 * torch.tanh(logits / 15)
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))


with torch.device("meta"):
    model = GPT()
model.to_empty(device=device)
model.init_weights()
matrices = [p for n, p in model.named_parameters() if p.dim() == 2 and "wte" not in n and "lm_head" not in n]
embeds = [model.wte.weight, model.lm_head.weight]
opt = torch.optim.AdamW(
    [{"params": matrices, "lr": 2e-3}, {"params": embeds, "lr": 4e-3}],
    betas=(0.8, 0.95),
    weight_decay=0.0,
    fused=True,
)
report("meta_init_to_empty")

gen = torch.Generator().manual_seed(11)
ring = [torch.empty(B, SEQ + 1, dtype=torch.long, pin_memory=True) for _ in range(2)]


def next_batch(i):
    buf = ring[i % 2]
    buf.copy_(torch.randint(0, VOCAB, (B, SEQ + 1), generator=gen))
    gpu = buf.to(device, non_blocking=True)
    return gpu[:, :-1], gpu[:, 1:]


hs = torch.cuda.host_memory_stats()
print("host pinned", hs["allocated_bytes.current"], hs["num_host_alloc"], hs["active_requests.current"])
model.train()
x, y = next_batch(0)
for step in range(10):
    for micro in range(2):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x, y) / 2
        x, y = next_batch(step * 2 + micro + 1)
        loss.backward()
    opt.step()
    model.zero_grad(set_to_none=True)
    print(step, round(loss.item() * 2, 3))
report("train_10_steps_2_micro")

torch.accelerator.empty_cache()
torch.accelerator.reset_accumulated_memory_stats()
model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    total = 0.0
    for i in range(4):
        x, y = next_batch(100 + i)
        total += model(x, y).item()
print("val", round(total / 4, 3))
report("eval_after_empty_cache")

PROMPTS, NEW = 8, 128
caches = [
    tuple(torch.zeros(PROMPTS, HEADS, 64 + NEW, HD, device=device, dtype=torch.bfloat16) for _ in range(2))
    for _ in range(LAYERS)
]
model.to(torch.bfloat16)
with torch.inference_mode():
    idx = torch.randint(0, VOCAB, (PROMPTS, 64), device=device)
    logits = model(idx, caches=caches, pos=0)
    out = []
    for i in range(NEW):
        probs = torch.softmax(logits[:, -1] / 0.8, dim=-1)
        nxt = torch.multinomial(probs, 1)
        out.append(nxt)
        logits = model(nxt, caches=caches, pos=64 + i)
print(torch.cat(out, 1).shape)
report("kv_cache_sampling_inference_mode")
