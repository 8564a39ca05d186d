"""SimMIM (Xie et al. 2022) masked image modeling written on timm 1.0.29's `vit_relpos_small_patch16_224`
(relative-position MLP bias, no class token, average pooling). The encoder's own `patch_embed` embeds the
image; masked patches are replaced by a learned mask token (masks drawn on the GPU in 32 x 32 blocks: 60% of
the 7 x 7 block grid by `argsort` of uniform noise, `repeat_interleave`d to the 14 x 14 patch grid and to
pixels); the encoder's `blocks` run with the shared relative-position bias as its `forward_features` does,
with `set_grad_checkpointing()`; a 1x1 conv to 16 * 16 * 3 channels and `pixel_shuffle(16)` reconstruct
the image and the L1 loss is taken on the masked pixels only. Phase 1: building it and the optimizer from
timm's `param_groups_layer_decay(encoder, weight_decay=0.05, layer_decay=0.75)` (one group per depth with an
`lr_scale`) plus the decoder and mask token, made `radabelief` by `create_optimizer_v2`, with timm's
`CosineLRScheduler` stepped per update (`step_update`, warmup 2). Phase 2: 8 pretraining steps of 64 images
224 x 224 in bf16 autocast with `clip_grad_norm_(3.0)`. Phase 3: a kNN probe under `torch.inference_mode()`
and bf16 autocast: `forward_features` + `forward_head(pre_logits=True)` features of a 512-image bank in
batches of 128, L2-normalised, then 256 queries against it (`mm`, `topk(20)`, temperature-weighted votes
by `scatter_add_` into 10 classes). Phase 4: the decoder and mask token freed, `reset_classifier(10)` and 4
fine-tuning steps of 48 images (grad checkpointing off, fp32, timm's `LabelSmoothingCrossEntropy(0.1)`,
plain AdamW on the whole encoder).
4 phases."""

import timm
import torch
import torch.nn.functional as F
from timm.loss import LabelSmoothingCrossEntropy
from timm.optim import create_optimizer_v2, param_groups_layer_decay
from timm.scheduler import CosineLRScheduler
from torch import nn

torch.manual_seed(2922)
dev = "cuda"
B, SIZE, PATCH, MASK_PATCH, RATIO = 64, 224, 16, 32, 0.6


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class SimMIM(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        dim = encoder.embed_dim
        self.mask_token = nn.Parameter(torch.zeros(1, 1, dim))
        nn.init.trunc_normal_(self.mask_token, std=0.02)
        self.decoder = nn.Conv2d(dim, PATCH * PATCH * 3, 1)

    def forward(self, images, mask):
        enc = self.encoder
        x = enc.patch_embed(images)
        n, length, _ = x.shape
        w = mask.flatten(1).unsqueeze(-1).to(x.dtype)
        x = x * (1 - w) + self.mask_token.expand(n, length, -1) * w
        rel = enc.shared_rel_pos.get_bias() if enc.shared_rel_pos is not None else None
        for blk in enc.blocks:
            if enc.grad_checkpointing:
                x = torch.utils.checkpoint.checkpoint(blk, x, shared_rel_pos=rel, use_reentrant=False)
            else:
                x = blk(x, shared_rel_pos=rel)
        x = enc.norm(x)
        side = SIZE // PATCH
        x = x.transpose(1, 2).reshape(n, -1, side, side)
        rec = F.pixel_shuffle(self.decoder(x), PATCH)
        pix_mask = mask.repeat_interleave(PATCH, 1).repeat_interleave(PATCH, 2).unsqueeze(1)
        l1 = F.l1_loss(rec.float(), images.float(), reduction="none")
        return (l1 * pix_mask).sum() / (pix_mask.sum() * 3 + 1e-5)


def block_masks(n):
    grid = SIZE // MASK_PATCH
    noise = torch.rand(n, grid * grid, device=dev)
    keep = int(grid * grid * RATIO)
    ids = noise.argsort(1)[:, :keep]
    m = torch.zeros(n, grid * grid, device=dev).scatter_(1, ids, 1.0).view(n, grid, grid)
    scale = MASK_PATCH // PATCH
    return m.repeat_interleave(scale, 1).repeat_interleave(scale, 2)


encoder = timm.create_model("vit_relpos_small_patch16_224", pretrained=False, num_classes=0)
model = SimMIM(encoder).to(dev)
encoder.set_grad_checkpointing(True)
groups = param_groups_layer_decay(encoder, weight_decay=0.05, layer_decay=0.75)
groups.append({"params": [model.mask_token, *model.decoder.parameters()], "weight_decay": 0.0})
optimizer = create_optimizer_v2(groups, "radabelief", lr=1.5e-3, weight_decay=0.05)
scheduler = CosineLRScheduler(
    optimizer, t_initial=8, lr_min=1e-5, warmup_t=2, warmup_lr_init=1e-5, t_in_epochs=False
)
print("params", sum(p.numel() for p in model.parameters()), "groups", len(optimizer.param_groups))
report("simmim_vit_relpos_build_layer_decay_radabelief")

model.train()
for step in range(8):
    images = torch.randn(B, 3, SIZE, SIZE, device=dev)
    mask = block_masks(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(images, mask)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)
    optimizer.step()
    scheduler.step_update(step + 1)
print("pretrain loss", round(loss.item(), 4), "masked", int(mask.sum()))
report("simmim_pretrain_bf16_grad_checkpointing")

del images, mask, loss
encoder.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    bank, bank_labels = [], torch.randint(0, 10, (512,), device=dev)
    for _i in range(4):
        x = torch.randn(128, 3, SIZE, SIZE, device=dev)
        f = encoder.forward_head(encoder.forward_features(x), pre_logits=True)
        bank.append(F.normalize(f.float(), dim=1))
    bank = torch.cat(bank)
    queries = torch.randn(256, 3, SIZE, SIZE, device=dev)
    q = F.normalize(encoder.forward_head(encoder.forward_features(queries), pre_logits=True).float(), dim=1)
    sim, idx = (q @ bank.T).topk(20, dim=1)
    votes = torch.zeros(256, 10, device=dev).scatter_add_(1, bank_labels[idx], (sim / 0.07).exp())
    pred = votes.argmax(1)
print("knn", pred[:8].tolist())
report("knn_probe_inference_mode_bf16")

del bank, bank_labels, queries, q, sim, idx, votes, pred, x, f, optimizer, scheduler, groups
model.mask_token = None
model.decoder = None
encoder.set_grad_checkpointing(False)
encoder.reset_classifier(10)
encoder.to(dev).train()
optimizer = torch.optim.AdamW(encoder.parameters(), lr=1e-4, weight_decay=0.05)
criterion = LabelSmoothingCrossEntropy(smoothing=0.1)
for _step in range(4):
    images = torch.randn(48, 3, SIZE, SIZE, device=dev)
    labels = torch.randint(0, 10, (48,), device=dev)
    loss = criterion(encoder(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
print("finetune loss", round(loss.item(), 4))
report("reset_classifier_finetune_fp32_adamw")
