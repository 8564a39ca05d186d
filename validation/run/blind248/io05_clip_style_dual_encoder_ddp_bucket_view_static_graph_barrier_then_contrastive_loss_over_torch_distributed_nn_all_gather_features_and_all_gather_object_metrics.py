"""A CLIP-style contrastive program under DDP on one GPU, as open_clip writes its loss: an image tower
(torchvision ResNet-18 to a 512 projection) and a text tower (an `nn.TransformerEncoder` of 4 layers,
d 512, 8 heads, over 77 tokens, vocab 49408, to a 512 projection) in one module wrapped by DDP with
`gradient_as_bucket_view=True` and `static_graph=True`. `dist.barrier()` right after the process group
starts (before any tensor is on the GPU). Each step's features are gathered across ranks with the
autograd-aware `torch.distributed.nn.functional.all_gather` (the gradient flows back through its
reduce-scatter), logits scaled by a learnable temperature, symmetric cross-entropy; the loss averaged
across ranks with `dist.all_reduce` for logging; bf16 autocast; AdamW (foreach). Batch 128 (images
224 x 224), 3 steps; then an evaluation under no_grad gathering features with `dist.all_gather` into
a list and metrics with `dist.all_gather_object`, then a final barrier. Process group:
init_process_group('nccl') with rank 0 of 1 and MASTER_ADDR/PORT set by the script. 4 phases."""

import os
import socket

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as dist_nn
import torch.nn as nn
import torch.nn.functional as F
import torchvision

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
torch.cuda.set_device(0)
dist.init_process_group("nccl")
dist.barrier()

torch.manual_seed(2485)
V, T, D, E, B = 49408, 77, 512, 512, 128


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class TextTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(T, D))
        layer = nn.TransformerEncoderLayer(D, 8, 4 * D, dropout=0.0, activation="gelu", batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(D)
        self.proj = nn.Linear(D, E, bias=False)

    def forward(self, text):
        x = self.enc(self.tok(text) + self.pos)
        return self.proj(self.ln(x[:, -1]))


class CLIP(nn.Module):
    def __init__(self):
        super().__init__()
        self.visual = torchvision.models.resnet18(num_classes=E)
        self.text = TextTower()
        self.logit_scale = nn.Parameter(torch.tensor(2.6592))

    def forward(self, images, text):
        img = F.normalize(self.visual(images), dim=-1)
        txt = F.normalize(self.text(text), dim=-1)
        return img, txt, self.logit_scale.exp()


report("barrier_before_model")

model = nn.parallel.DistributedDataParallel(
    CLIP().cuda(), device_ids=[0], gradient_as_bucket_view=True, static_graph=True
)
opt = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.2, foreach=True)
images = torch.randn(B, 3, 224, 224, device="cuda")
text = torch.randint(0, V, (B, T), device="cuda")
labels = torch.arange(B, device="cuda")
report("ddp_setup")

for _ in range(3):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        img, txt, scale = model(images, text)
    all_img = torch.cat(dist_nn.all_gather(img.float()))
    all_txt = torch.cat(dist_nn.all_gather(txt.float()))
    logits = scale * all_img @ all_txt.t()
    loss = (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    logged = loss.detach().clone()
    dist.all_reduce(logged, op=dist.ReduceOp.SUM)
    del img, txt, scale, all_img, all_txt, logits, loss
report("train_contrastive_3_steps")

model.eval()
with torch.no_grad():
    img, txt, _ = model(images, text)
    gathered = [torch.empty_like(img) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, img)
    sims = torch.cat(gathered) @ txt.t()
    acc = (sims.argmax(-1) == labels).float().mean().item()
    metrics = [None] * dist.get_world_size()
    dist.all_gather_object(metrics, {"acc": acc, "loss": logged.item()})
    del img, txt, gathered, sims
dist.barrier()
report("eval_all_gather")

dist.destroy_process_group()
