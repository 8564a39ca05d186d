"""data2vec (vision) pretraining written after fairseq's data2vec and facebookresearch/data2vec_vision:
a Hugging Face Data2VecVisionModel built from Data2VecVisionConfig (ViT-B/16 at 224, shared
relative position bias, layer scale 0.1, mask token, drop-path 0.1) as the student, which sees
60% of the patches replaced by the mask token (a per-image random permutation made on the host,
the boolean mask sent to the GPU), and a deep copy of it as the EMA teacher (requires_grad off,
eval mode, `_foreach_lerp_` toward the student at decay 0.9998) over the unmasked image with
output_hidden_states; the targets are the mean of the teacher's top 6 blocks' outputs, each
instance-normalised over the tokens (`F.instance_norm` of the transposed (B, C, T) view), the
student's masked tokens are picked by boolean indexing and regressed by a linear head with
smooth L1 (beta 2); bf16 autocast, AdamW(fused=True) over layer-wise learning-rate decay groups
(0.65 per block, biases and norms without decay), gradient clipping at 3.0; batch 128, 3 steps;
then the mean-pooled features of 512 images at batch 256 under inference_mode; 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import Data2VecVisionConfig, Data2VecVisionModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13603)
if SMALL:
    B, IMG, N_EVAL, EB = 4, 64, 8, 4
    cfg = dict(hidden_size=96, num_hidden_layers=4, num_attention_heads=2, intermediate_size=384)
else:
    B, IMG, N_EVAL, EB = 128, 224, 512, 256
    cfg = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
TOP_K, MASK_RATIO = 6 if not SMALL else 2, 0.6
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

config = Data2VecVisionConfig(
    image_size=IMG,
    patch_size=16,
    use_mask_token=True,
    use_shared_relative_position_bias=True,
    use_relative_position_bias=False,
    layer_scale_init_value=0.1,
    drop_path_rate=0.1,
    use_mean_pooling=True,
    **cfg,
)
student = Data2VecVisionModel(config, add_pooling_layer=True).to(device)
teacher = copy.deepcopy(student)
teacher.requires_grad_(False)
teacher.eval()
head = nn.Linear(config.hidden_size, config.hidden_size).to(device)
num_patches = (IMG // 16) ** 2
n_mask = int(num_patches * MASK_RATIO)


def layer_id(name, n_layers):
    if name.startswith("embeddings"):
        return 0
    if name.startswith("encoder.layer."):
        return int(name.split(".")[2]) + 1
    return n_layers + 1


groups = {}
n_layers = config.num_hidden_layers
for name, p in list(student.named_parameters()) + [("head." + n, p) for n, p in head.named_parameters()]:
    if not p.requires_grad:
        continue
    lid = layer_id(name, n_layers)
    no_decay = p.ndim == 1 or name.endswith(".bias") or "position" in name or "mask_token" in name
    key = (lid, no_decay)
    if key not in groups:
        groups[key] = {
            "params": [],
            "weight_decay": 0.0 if no_decay else 0.05,
            "lr": 2e-3 * 0.65 ** (n_layers + 1 - lid),
        }
    groups[key]["params"].append(p)
optimizer = torch.optim.AdamW(list(groups.values()), lr=2e-3, betas=(0.9, 0.999), fused=True)
s_params = [p for p in student.parameters()]
t_params = [p for p in teacher.parameters()]
mean = torch.tensor([0.5, 0.5, 0.5], device=device).view(1, 3, 1, 1)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.train()
for step in range(3):
    images = (torch.rand(B, 3, IMG, IMG, device=device) - mean) / 0.5
    order = torch.rand(B, num_patches).argsort(dim=1)
    mask_cpu = torch.zeros(B, num_patches, dtype=torch.bool)
    mask_cpu.scatter_(1, order[:, :n_mask], True)
    mask = mask_cpu.to(device, non_blocking=True)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        t_out = teacher(images, output_hidden_states=True)
        layers = t_out.hidden_states[-TOP_K:]
        y = [F.instance_norm(tl[:, 1:].float().transpose(1, 2)).transpose(1, 2) for tl in layers]
        y = sum(y) / len(y)
        y = y[mask]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        s_out = student(images, bool_masked_pos=mask).last_hidden_state[:, 1:]
        x = head(s_out[mask])
    loss = F.smooth_l1_loss(x.float(), y, reduction="none", beta=2.0).sum(dim=-1).mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 3.0)
    optimizer.step()
    with torch.no_grad():
        torch._foreach_lerp_(t_params, s_params, 1 - 0.9998)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} masked {int(mask_cpu.sum())}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del t_out, layers, y, s_out, x, loss
student.eval()
feats = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    for _i in range(0, N_EVAL, EB):
        xb = (torch.rand(EB, 3, IMG, IMG, device=device) - mean) / 0.5
        feats.append(student(xb).pooler_output.float())
    feats = F.normalize(torch.cat(feats), dim=-1)
if device == "cuda":
    print(
        f"features {tuple(feats.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
