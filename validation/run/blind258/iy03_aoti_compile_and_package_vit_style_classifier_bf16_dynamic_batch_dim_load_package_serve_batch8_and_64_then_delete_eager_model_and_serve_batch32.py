"""AOTInductor serving: a ViT-style image classifier (16 x 16 patches of 224 x 224 images through a
convolution, 6 pre-norm blocks of d 768 with 12 heads through SDPA and MLP 3,072, a class token, 1,000
classes; bf16 weights, eval) exported with a dynamic batch (`Dim("batch", min=1, max=128)`), compiled and
packaged by `torch._inductor.aoti_compile_and_package` (its Triton kernels autotuned at compile time, the
weights written into the package), loaded with `aoti_load_package` (the loaded model copies the weights
into its own constant buffer) and served at batch 8 and 64 under inference_mode; then the eager model
and the exported program are deleted (`gc.collect()`) and the loaded model serves batch 32.

No value read back from the GPU decides a size. 5 phases."""

import gc
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2583)
D, H, L, P, IMG = 768, 12, 6, 16, 224


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
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = nn.Conv2d(3, D, P, stride=P)
        n = (IMG // P) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, D))
        self.pos = nn.Parameter(torch.zeros(1, n + 1, D))
        self.blocks = nn.Sequential(*[Block() for _ in range(L)])
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, 1000)

    def forward(self, images):
        x = self.patch(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


model = ViT().cuda().to(torch.bfloat16).eval()
example = torch.randn(8, 3, IMG, IMG, device="cuda", dtype=torch.bfloat16)
batch = torch.export.Dim("batch", min=1, max=128)
ep = torch.export.export(model, (example,), dynamic_shapes={"images": {0: batch}})
report("build_and_export_dynamic_batch")

package = os.path.join(tempfile.mkdtemp(), "vit_classifier.pt2")
path = torch._inductor.aoti_compile_and_package(ep, package_path=package)
report("aoti_compile_and_package")

runner = torch._inductor.aoti_load_package(path)
with torch.inference_mode():
    logits = runner(torch.randn(8, 3, IMG, IMG, device="cuda", dtype=torch.bfloat16))
    top = logits.float().softmax(-1).topk(5)
report("load_package_serve_batch8")

with torch.inference_mode():
    for _ in range(3):
        logits = runner(torch.randn(64, 3, IMG, IMG, device="cuda", dtype=torch.bfloat16))
report("serve_batch64")

del model, ep, example, logits, top
gc.collect()
with torch.inference_mode():
    for _ in range(2):
        logits = runner(torch.randn(32, 3, IMG, IMG, device="cuda", dtype=torch.bfloat16))
report("eager_model_deleted_serve_batch32")
