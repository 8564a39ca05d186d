"""Loading a checkpoint into a model built on the meta device, the three ways PyTorch's "loading an nn.Module
from a checkpoint" recipe and users write it. A decoder (d 1536, 6 blocks of 12 heads through SDPA, MLP
6144, vocab 50304, the head tied to the token embedding; fp32) is trained one step by SGD with momentum at
8 x 512 and its state dict (both tied names over one storage) written by torch.save to a file. Then: (1)
`torch.device("meta")`, `torch.load(mmap=True, map_location="cpu")`, `load_state_dict(sd, assign=True)`
(each tied name wraps its own Parameter: the tie is gone) and `model.cuda()`, which copies the embedding
twice, then re-tied by hand (one copy freed); (2) `to_empty(device="cuda")` and
`load_state_dict(torch.load(..., map_location="cuda"))`, a second copy of every weight while the copy runs;
(3) `torch.load(map_location="cuda", mmap=True)`, each tensor cast to bf16 on the GPU,
`load_state_dict(assign=True)` and the tie restored, then bf16 inference under no_grad at 16 x 512.

The first three phases end with what they built released and the cache emptied. No value-dependent
sizes. 5 phases."""

import gc
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2603)
V, D, H, L, T, B = 50304, 1536, 12, 6, 512, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


tmp = tempfile.TemporaryDirectory()
path = os.path.join(tmp.name, "decoder.pt")

model = Decoder().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
idx = torch.randint(0, V, (B, T), device="cuda")
loss = F.cross_entropy(model(idx).view(-1, V), idx.view(-1))
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
del loss
torch.save(model.state_dict(), path)
del model, opt
gc.collect()
torch.cuda.empty_cache()
report("train_one_step_torch_save_then_release")

with torch.device("meta"):
    model = Decoder()
sd = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
model.load_state_dict(sd, assign=True)
del sd
model.cuda()
untied = torch.cuda.memory_allocated()
model.lm_head.weight = model.wte.weight
print("assign then cuda: tie restored freed", untied - torch.cuda.memory_allocated(), "bytes")
del model
gc.collect()
torch.cuda.empty_cache()
report("meta_assign_mmap_cpu_then_cuda_retie")

with torch.device("meta"):
    model = Decoder()
model.to_empty(device="cuda")
model.load_state_dict(torch.load(path, map_location="cuda", weights_only=True))
del model
gc.collect()
torch.cuda.empty_cache()
report("meta_to_empty_cuda_then_load_state_dict_copy")

with torch.device("meta"):
    model = Decoder()
sd = torch.load(path, map_location="cuda", mmap=True, weights_only=True)
sd = {k: v.to(torch.bfloat16) for k, v in sd.items()}
model.load_state_dict(sd, assign=True)
model.lm_head.weight = model.wte.weight
del sd
report("map_location_cuda_bf16_cast_then_assign")

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (16, T), device="cuda")
    logits = model(idx)
    del logits
report("bf16_inference_no_grad")
tmp.cleanup()
