"""DeiT-style knowledge distillation with the frozen teacher kept out of the student's way: the allocator
is configured by the script before torch is imported (`PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True,
roundup_power2_divisions:[128:2,512:4,>:8]"`: expandable segments, and allocation sizes rounded to 2, 4 or
8 power-of-two divisions by size bracket), and the teacher lives in its own `torch.cuda.MemPool`: its fp16
weights are moved to the GPU inside `torch.cuda.use_mem_pool(pool)`, and every teacher forward (no_grad,
eval, so nn.TransformerEncoderLayer takes its fused fast path) runs inside the same context, so its
activations and the logits it returns come from the pool's segments, not the student's.

Teacher: a ViT-B/16-like classifier (patch conv 16 x 16, cls token, 12 pre-norm encoder layers at 768,
12 heads, GELU, 1000 classes) in fp16. Student: a 6-layer ViT at 384 wide (6 heads) in fp32, trained
under bf16 autocast with fused AdamW on hard-label cross-entropy plus the KL to the teacher's softened
logits (T = 4), batch sizes varying step to step (48, 64, 40, 64, 56, 32) at 224 x 224.

Phases: the teacher built in its pool and the student on the default pool; 6 distillation steps; the
student evaluated at batch 128 under inference_mode with the teacher's agreement counted (teacher in its
pool again); the teacher deleted, the pool dropped and `empty_cache()`, then 3 student-only fine-tuning
steps at batch 96. 4 phases. Seeded; no value-dependent sizes."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True,roundup_power2_divisions:[128:2,512:4,>:8]"

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(3101)
dev = torch.device("cuda")
NCLS, T = 1000, 4.0


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class ViT(nn.Module):
    def __init__(self, dim, depth, heads):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, 197, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, NCLS)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.encoder(x)
        return self.head(self.norm(x[:, 0]))


pool = torch.cuda.MemPool()
with torch.cuda.use_mem_pool(pool):
    teacher = ViT(768, 12, 12).to(dev, torch.float16).eval()
for p in teacher.parameters():
    p.requires_grad_(False)
student = ViT(384, 6, 6).to(dev)
opt = torch.optim.AdamW(student.parameters(), lr=5e-4, weight_decay=0.05, fused=True)
print(f"teacher pool snapshot segments {len(pool.snapshot())}")
report("teacher in pool, student")


def teacher_logits(model, mem_pool, x):
    with torch.no_grad(), torch.cuda.use_mem_pool(mem_pool):
        return model(x.half()).float()


for step, bs in enumerate([48, 64, 40, 64, 56, 32]):
    x = torch.randn(bs, 3, 224, 224, device=dev)
    y = torch.randint(0, NCLS, (bs,), device=dev)
    t = teacher_logits(teacher, pool, x)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        s = student(x)
    s = s.float()
    kd = F.kl_div(F.log_softmax(s / T, -1), F.log_softmax(t / T, -1), reduction="batchmean", log_target=True)
    loss = 0.5 * F.cross_entropy(s, y) + 0.5 * kd * T * T
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"distill step {step} bs {bs} loss {loss.item():.4f}")
    del x, y, t, s, kd, loss
report("distillation steps")

student.eval()
agree = 0
with torch.inference_mode():
    for _ in range(2):
        x = torch.randn(128, 3, 224, 224, device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            s = student(x)
        t = teacher_logits(teacher, pool, x)
        agree += (s.argmax(-1) == t.argmax(-1)).sum().item()
        del x, s, t
print(f"agreement {agree}")
report("evaluation with teacher")

del teacher
del pool
torch.cuda.empty_cache()
student.train()
for step in range(3):
    x = torch.randn(96, 3, 224, 224, device=dev)
    y = torch.randint(0, NCLS, (96,), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(student(x).float(), y, label_smoothing=0.1)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"finetune step {step} loss {loss.item():.4f}")
    del x, y, loss
report("pool dropped, student fine-tune")
