"""Token Merging (ToMe, Bolya et al. 2023) written by hand into a timm ViT-B/16, the way the paper's
reference code patches timm: every Block's forward is replaced so that, between attention and MLP, the
tokens are split into alternating sets A and B, each A token is matched to its most similar B token
(cosine similarity of the attention keys averaged over heads), the r best-matched A tokens are merged
into their B partners by a size-weighted average (scatter_reduce "sum" of x * size and of size), and
attention is made proportional (log of the token sizes added to the logits). The class token is
protected. r is constant per layer or a decreasing schedule.

Phases: (1) the model built and patched; (2) fp16 autocast inference under inference_mode at batch 128,
r = 0 then r = 16 (tokens 197 -> 197 - 12*16); (3) fine-tuning with merging on (r = 8), bf16 autocast,
drop path 0.1, AdamW with a layer-wise lr decay param-group list, label smoothing, 3 steps at batch 48;
(4) a .half() copy evaluated with a decreasing r schedule (r = 24 ... 2) at batch 256 under no_grad,
returning the final token sizes."""

import math
import types

import timm
import torch
import torch.nn.functional as F

torch.manual_seed(30501)
device = "cuda" if torch.cuda.is_available() else "cpu"
B_INF, B_TRAIN, B_EVAL = 128, 48, 256


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def bipartite_soft_matching(metric, r):
    """ToMe's matching with a protected class token: returns merge(x, mode)."""
    t = metric.shape[1]
    r = min(r, (t - 1) // 2)
    if r <= 0:
        return None
    with torch.no_grad():
        metric = metric / metric.norm(dim=-1, keepdim=True)
        a, b = metric[..., ::2, :], metric[..., 1::2, :]
        scores = a @ b.transpose(-1, -2)
        scores[..., 0, :] = -math.inf
        node_max, node_idx = scores.max(dim=-1)
        edge_idx = node_max.argsort(dim=-1, descending=True)[..., None]
        unm_idx = edge_idx[..., r:, :]
        src_idx = edge_idx[..., :r, :]
        dst_idx = node_idx[..., None].gather(dim=-2, index=src_idx)
        unm_idx = unm_idx.sort(dim=1)[0]

    def merge(x, mode="mean"):
        src, dst = x[..., ::2, :], x[..., 1::2, :]
        n, t1, c = src.shape
        unm = src.gather(dim=-2, index=unm_idx.expand(n, t1 - r, c))
        src = src.gather(dim=-2, index=src_idx.expand(n, r, c))
        dst = dst.scatter_reduce(-2, dst_idx.expand(n, r, c), src, reduce=mode)
        return torch.cat([unm, dst], dim=1)

    return merge


def merge_wavg(merge, x, size):
    x = merge(x * size, mode="sum")
    size = merge(size, mode="sum")
    return x / size, size


def tome_attention(self, x, size):
    B, N, C = x.shape
    qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    q, k = self.q_norm(q), self.k_norm(k)
    attn = (q * self.scale) @ k.transpose(-2, -1)
    attn = attn + size.log()[:, None, None, :, 0]
    attn = self.attn_drop(attn.softmax(dim=-1))
    x = (attn @ v).transpose(1, 2).reshape(B, N, C)
    x = self.proj_drop(self.proj(self.norm(x)))
    return x, k.mean(1)


def tome_block(self, x):
    state = self._tome
    size = state["size"]
    if size is None:
        size = torch.ones_like(x[..., 0, None])
    x_attn, metric = tome_attention(self.attn, self.norm1(x), size)
    x = x + self.drop_path1(self.ls1(x_attn))
    r = state["r"].pop(0)
    merge = bipartite_soft_matching(metric, r)
    if merge is not None:
        x, size = merge_wavg(merge, x, size)
    state["size"] = size
    x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
    return x


def apply_tome(model):
    state = {"r": [], "size": None}
    model._tome_state = state
    for blk in model.blocks:
        blk._tome = state
        blk.forward = types.MethodType(tome_block, blk)
    return model


def run(model, x, r):
    st = model._tome_state
    st["r"] = list(r) if isinstance(r, (list, tuple)) else [r] * len(model.blocks)
    st["size"] = None
    return model(x)


model = timm.create_model("vit_base_patch16_224", pretrained=False, num_classes=1000, drop_path_rate=0.1)
model = apply_tome(model.to(device))
report("built and patched")

# (2) fp16 inference, r = 0 and r = 16
model.eval()
images = torch.randn(B_INF, 3, 224, 224, device=device)
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    base_logits = run(model, images, 0)
    merged_logits = run(model, images, 16)
    agree = (base_logits.argmax(-1) == merged_logits.argmax(-1)).float().mean()
print(f"r=16 tokens left {model._tome_state['size'].shape[1]} top1 agreement {agree.item():.3f}")
del images, base_logits, merged_logits
report("fp16 inference r sweep")

# (3) fine-tune with merging on
model.train()
decay, groups = 0.75, []
n_layers = len(model.blocks) + 1
for name, p in model.named_parameters():
    if name.startswith("blocks."):
        layer = int(name.split(".")[1]) + 1
    elif name.startswith(("cls_token", "pos_embed", "patch_embed")):
        layer = 0
    else:
        layer = n_layers
    wd = 0.0 if p.ndim == 1 or name in ("cls_token", "pos_embed") else 0.05
    groups.append({"params": [p], "lr": 1e-4 * decay ** (n_layers - layer), "weight_decay": wd})
optimizer = torch.optim.AdamW(groups, betas=(0.9, 0.999))
for step in range(3):
    x = torch.randn(B_TRAIN, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (B_TRAIN,), device=device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = F.cross_entropy(run(model, x, 8), y, label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
del x, y, loss
report("bf16 fine-tune with merging")

# (4) half copy, decreasing schedule
optimizer.state.clear()
del optimizer, groups
half = model.half().eval()
schedule = [24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2]
with torch.no_grad():
    out = run(half, torch.randn(B_EVAL, 3, 224, 224, device=device, dtype=torch.float16), schedule)
    sizes = half._tome_state["size"]
print(
    f"schedule eval logits {tuple(out.shape)} tokens left {sizes.shape[1]} max size {sizes.max().item():.0f}"
)
report("half eval with decreasing schedule")
