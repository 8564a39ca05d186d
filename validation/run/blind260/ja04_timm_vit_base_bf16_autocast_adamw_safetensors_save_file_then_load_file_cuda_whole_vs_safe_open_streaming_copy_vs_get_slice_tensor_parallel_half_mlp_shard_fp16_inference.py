"""safetensors checkpoints read three ways into a timm ViT-B/16 (patch 16, 224 px, 12 blocks of 768, MLP 3072,
1000 classes): the model trained two steps under bf16 autocast by AdamW (foreach) at batch 64, its state
dict written by `safetensors.torch.save_file` (each tensor copied to the host). Then into a model built on
the meta device and materialised by `to_empty(device="cuda")`: (1) `load_file(path, device="cuda")`, the
whole checkpoint on the GPU beside the model, then `load_state_dict`; (2) `safe_open(path, framework="pt",
device="cuda")` streamed one tensor at a time into the parameters by `copy_` (at most one checkpoint tensor
beside the model); (3) a tensor-parallel rank's shard: a ViT with half-width MLPs (1536) whose fc1 rows and
fc2 columns are read by `get_slice` (the first half of each), the other tensors whole; last, the first
model in fp16 (`.half()`) for inference under no_grad at batch 128.

Each load phase ends with its model released and the cache emptied. No value-dependent sizes. 5 phases."""

import gc
import os
import tempfile

import timm
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

torch.manual_seed(2604)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def vit(mlp_ratio=4.0):
    return timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000, mlp_ratio=mlp_ratio)


def meta_vit(mlp_ratio=4.0):
    with torch.device("meta"):
        m = vit(mlp_ratio)
    return m.to_empty(device="cuda")


tmp = tempfile.TemporaryDirectory()
path = os.path.join(tmp.name, "vit.safetensors")

model = vit().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
for _ in range(2):
    x = torch.randn(64, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (64,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del x, y, loss
del opt
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
report("train_bf16_autocast_two_steps_save_file")

m1 = meta_vit()
sd = load_file(path, device="cuda")
m1.load_state_dict(sd)
del sd, m1
gc.collect()
torch.cuda.empty_cache()
report("to_empty_then_load_file_cuda_whole_load_state_dict")

m2 = meta_vit()
params = m2.state_dict()
with safe_open(path, framework="pt", device="cuda") as f:
    for name in f.keys():
        params[name].copy_(f.get_tensor(name))
del params, m2
gc.collect()
torch.cuda.empty_cache()
report("to_empty_then_safe_open_streaming_copy")

m3 = meta_vit(mlp_ratio=2.0)
shard = m3.state_dict()
with safe_open(path, framework="pt", device="cuda") as f:
    for name in f.keys():
        if name.endswith("mlp.fc1.weight") or name.endswith("mlp.fc1.bias"):
            part = f.get_slice(name)[:1536]
        elif name.endswith("mlp.fc2.weight"):
            part = f.get_slice(name)[:, :1536]
        else:
            part = f.get_tensor(name)
        shard[name].copy_(part)
        del part
with torch.no_grad():
    out = m3(torch.randn(32, 3, 224, 224, device="cuda"))
del shard, m3, out
gc.collect()
torch.cuda.empty_cache()
report("get_slice_half_mlp_shard_then_forward")

model.half().eval()
with torch.no_grad():
    logits = model(torch.randn(128, 3, 224, 224, device="cuda", dtype=torch.float16))
    del logits
report("fp16_inference_batch_128")
tmp.cleanup()
