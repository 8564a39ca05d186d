"""PyTorch's own memory and FLOP tooling around a ViT-B/16 classifier (12 x 768, 12 heads, 1,000 classes,
written by hand, fp32 weights, bf16 autocast, foreach AdamW), as one measures a job and sizes the next.
Phase 1: `torch.distributed._tools.mem_tracker.MemTracker.track_external(model, opt)` and two training
steps of 64 x 3 x 224 x 224 inside it (`reset_mod_stats()` after the first; a TorchDispatchMode plus
module hooks that tracks every storage through weak references; its peak estimate printed). Phase 2: one
step under `torch.utils.flop_counter.FlopCounterMode(display=False)` (another dispatch mode, with its own
module tracker), the total FLOPs printed. Phase 3: three plain steps with no tooling. Phase 4:
inference_mode evaluation of 256 images in batches of 128 under
`torch.utils.module_tracker.ModuleTracker`. Phase 5: a what-if for batch 256 -- a second model, its
optimizer and the batches are created under `torch._subclasses.FakeTensorMode` with `torch.device("cuda")`
(fake CUDA tensors: no device memory; `.to("cuda")` of fake parameters would need `swap_tensors`, which
FakeTensorMode's weak references refuse) and two training steps run under a MemTracker, its estimate
printed. 5 phases.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.module_tracker import ModuleTracker

torch.manual_seed(2853)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


D, H, L, P, IMG, C = 768, 12, 12, 16, 224, 1000


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, P)
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.randn(1, (IMG // P) ** 2 + 1, D) * 0.02)
        self.blocks = nn.Sequential(*[Block() for _ in range(L)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, C)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def step(model, opt, x, y):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


B = 64
model = ViT().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
mt = MemTracker()
mt.track_external(model, opt)
with mt:
    for i in range(2):
        x = torch.randn(B, 3, IMG, IMG, device=dev)
        y = torch.randint(0, C, (B,), device=dev)
        loss = step(model, opt, x, y)
        if i == 0:
            mt.reset_mod_stats()
real_est = sum(s.get("Total", 0) for d, s in mt.get_tracker_snapshot("peak").items() if d.type == "cuda")
print("real MemTracker peak estimate", real_est, "loss", round(loss.item(), 4))
del mt
report("real_steps_under_mem_tracker")

fc = FlopCounterMode(display=False)
with fc:
    x = torch.randn(B, 3, IMG, IMG, device=dev)
    y = torch.randint(0, C, (B,), device=dev)
    loss = step(model, opt, x, y)
print("flops per step", fc.get_total_flops())
report("one_step_under_flop_counter_mode")

for _ in range(3):
    x = torch.randn(B, 3, IMG, IMG, device=dev)
    y = torch.randint(0, C, (B,), device=dev)
    loss = step(model, opt, x, y)
print("plain loss", round(loss.item(), 4))
report("plain_steps")

model.eval()
seen = set()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16), ModuleTracker() as mtrk:
    correct = 0
    for _ in range(2):
        x = torch.randn(128, 3, IMG, IMG, device=dev)
        y = torch.randint(0, C, (128,), device=dev)
        correct += (model(x).argmax(1) == y).sum()
        seen.update(mtrk.parents)
print("eval correct", correct.item(), "modules seen", len(seen))
report("inference_mode_eval_module_tracker")

# what if the batch were 256? asked of fake tensors, which take no device memory
BIG = 256
with FakeTensorMode():
    with torch.device(dev):
        fmodel = ViT()
    fopt = torch.optim.AdamW(fmodel.parameters(), lr=1e-3, foreach=True)
    fmt = MemTracker()
    fmt.track_external(fmodel, fopt)
    with fmt:
        for i in range(2):
            fx = torch.randn(BIG, 3, IMG, IMG, device=dev)
            fy = torch.randint(0, C, (BIG,), device=dev)
            step(fmodel, fopt, fx, fy)
            if i == 0:
                fmt.reset_mod_stats()
    est = sum(s.get("Total", 0) for d, s in fmt.get_tracker_snapshot("peak").items() if d.type == "cuda")
print("fake-mode MemTracker estimate at batch 256", est)
del fmodel, fopt, fmt, fx, fy
report("fake_tensor_mode_what_if_batch_256_mem_tracker")
