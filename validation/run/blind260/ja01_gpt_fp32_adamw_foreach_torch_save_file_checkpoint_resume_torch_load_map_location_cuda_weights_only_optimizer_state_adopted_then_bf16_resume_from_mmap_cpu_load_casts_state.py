"""Resuming training from a torch.save checkpoint: a GPT-style model (d 1024, 8 blocks of 16 heads through
SDPA, MLP 4096, vocab 32000, untied head; fp32) trained two steps by AdamW (foreach) at batch 8 x 512, its
model and optimizer state dicts, the step and the CUDA RNG state written by torch.save to a file in a
temporary directory. The process then "restarts": everything deleted and the cache emptied, a fresh model
and optimizer built on the GPU, and the checkpoint read back with torch.load(map_location="cuda",
weights_only=True): every storage comes back to the GPU (the host-saved step counts too), load_state_dict
copies the weights, and Optimizer.load_state_dict adopts the restored moments as they are (already on the
param's device and dtype); two more steps. Last, the common fine-tune start: the model rebuilt in bf16 on
the GPU, the same checkpoint read with map_location="cpu" and mmap=True, the fp32 weights copied in (cast
by copy_), the optimizer's fp32 moments cast to bf16 on the GPU by load_state_dict
(`_process_value_according_to_param_policy`), one step.

No value-dependent sizes. 5 phases."""

import gc
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2601)
V, D, H, L, T, B = 32000, 1024, 16, 8, 512, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


def train_steps(model, opt, n, dtype=None):
    for _ in range(n):
        idx = torch.randint(0, V, (B, T), device="cuda")
        tgt = torch.randint(0, V, (B, T), device="cuda")
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss


tmp = tempfile.TemporaryDirectory()
path = os.path.join(tmp.name, "ckpt.pt")

model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
train_steps(model, opt, 2)
report("train_fp32_two_steps")

torch.save(
    {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "step": 2,
        "cuda_rng": torch.cuda.get_rng_state(),
    },
    path,
)
report("torch_save_to_file")

del model, opt
gc.collect()
torch.cuda.empty_cache()
model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
ckpt = torch.load(path, map_location="cuda", weights_only=True)
model.load_state_dict(ckpt["model"])
opt.load_state_dict(ckpt["optim"])
torch.cuda.set_rng_state(ckpt["cuda_rng"].cpu())
start = ckpt["step"]
del ckpt
report("resume_torch_load_map_location_cuda")

train_steps(model, opt, 2)
report("train_two_steps_after_resume")

del model, opt
gc.collect()
torch.cuda.empty_cache()
model = GPT().to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
ckpt = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
model.load_state_dict(ckpt["model"])
opt.load_state_dict(ckpt["optim"])
del ckpt
train_steps(model, opt, 1)
report("bf16_resume_from_mmap_cpu_load_one_step")
tmp.cleanup()
