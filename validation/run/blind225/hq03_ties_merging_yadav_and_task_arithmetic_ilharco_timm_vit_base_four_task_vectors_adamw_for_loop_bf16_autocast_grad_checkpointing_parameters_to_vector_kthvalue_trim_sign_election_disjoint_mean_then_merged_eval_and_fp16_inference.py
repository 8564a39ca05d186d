"""Task arithmetic (Ilharco et al. 2023) and TIES-merging (Yadav et al. 2023) of four fine-tuned copies of
a timm ViT-B/16 (vit_base_patch16_224, pretrained=False, num_classes=0: the shared encoder) with one linear
head per task (10, 37, 100 and 200 classes), in the style of the TIES reference code: flattened task
vectors stacked into a [tasks, n_params] matrix.

Phase 1: for each task a `copy.deepcopy` of the base encoder (timm's set_grad_checkpointing on) and its head
take 3 AdamW steps (foreach=False, the per-parameter loop) at batch 64 on 224 x 224 under bf16 autocast with
label smoothing 0.1; the task vector `parameters_to_vector(finetuned) - parameters_to_vector(base)` is kept
on the GPU. Phase 2, TIES: trim each row to its top 20% magnitudes with `torch.kthvalue` over |tau| along
dim 1, elect the sign of each parameter by the sign of the trimmed sum, the disjoint mean over agreeing
entries (`torch.where`), and the merged encoder loaded by `vector_to_parameters(base + lam * tau)`;
task arithmetic (base + 0.3 * sum of task vectors) alongside. Phase 3: no_grad bf16-autocast evaluation at
batch 256 of the TIES encoder, the task-arithmetic encoder and each fine-tuned encoder rebuilt from its task
vector (all six encoders resident), per task head. Phase 4: empty_cache(), the TIES encoder and heads in
fp16 under inference_mode at batch 512. 4 phases."""

import copy

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parameters_to_vector, vector_to_parameters

torch.manual_seed(22503)
device = "cuda"
TASK_CLASSES = [10, 37, 100, 200]
B, STEPS, TOP_K, LAM_TIES, LAM_TA = 64, 3, 0.2, 1.0, 0.3


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def task_batch(t, n):
    x = torch.randn(n, 3, 224, 224, device=device) + 0.2 * t
    y = torch.randint(0, TASK_CLASSES[t], (n,), device=device)
    return x, y


base = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=0).to(device)
base_vec = parameters_to_vector(base.parameters()).detach()
heads = [nn.Linear(base.num_features, c).to(device) for c in TASK_CLASSES]

task_vectors = []
for t, head in enumerate(heads):
    enc = copy.deepcopy(base)
    enc.set_grad_checkpointing(True)
    enc.train()
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=1e-4, weight_decay=0.1,
                            foreach=False)
    for _ in range(STEPS):
        x, y = task_batch(t, B)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(head(enc(x)), y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    task_vectors.append(parameters_to_vector(enc.parameters()).detach() - base_vec)
    print(f"task {t} loss {loss.item():.4f}")
    del enc, opt
report("fine-tune four tasks")

tv = torch.stack(task_vectors)
del task_vectors
n = tv.shape[1]
k = n - int(n * TOP_K)
thresh, _ = tv.abs().kthvalue(k, dim=1, keepdim=True)
trimmed = torch.where(tv.abs() >= thresh, tv, torch.zeros_like(tv))
elected = torch.sign(trimmed.sum(0))
agree = torch.where(elected.unsqueeze(0) > 0, trimmed > 0, trimmed < 0)
disjoint = (trimmed * agree).sum(0) / agree.sum(0).clamp(min=1)
ties_enc = copy.deepcopy(base)
vector_to_parameters(base_vec + LAM_TIES * disjoint, ties_enc.parameters())
ta_enc = copy.deepcopy(base)
vector_to_parameters(base_vec + LAM_TA * tv.sum(0), ta_enc.parameters())
print("kept fraction", (trimmed != 0).float().mean().item(), "agree", agree.float().mean().item())
del trimmed, agree, thresh
report("ties and task arithmetic merge")

finetuned = []
for t in range(len(TASK_CLASSES)):
    enc = copy.deepcopy(base)
    vector_to_parameters(base_vec + tv[t], enc.parameters())
    finetuned.append(enc.eval())
ties_enc.eval()
ta_enc.eval()
results = {}
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    for t, head in enumerate(heads):
        x, y = task_batch(t, 256)
        for name, enc in (("ties", ties_enc), ("task_arith", ta_enc), ("finetuned", finetuned[t])):
            results[(name, t)] = (head(enc(x)).argmax(-1) == y).float().mean()
print({f"{n}/{t}": round(v.item(), 3) for (n, t), v in results.items()})
report("merged eval")

del finetuned, ta_enc, tv, results, x, y
torch.cuda.empty_cache()
ties_enc.half()
for head in heads:
    head.half()
with torch.inference_mode():
    x = torch.randn(512, 3, 224, 224, device=device, dtype=torch.float16)
    feats = ties_enc(x)
    preds = [head(feats).argmax(-1) for head in heads]
print("fp16 ties inference", [tuple(p.shape) for p in preds], "max allocated", torch.cuda.max_memory_allocated())
report("fp16 inference")
