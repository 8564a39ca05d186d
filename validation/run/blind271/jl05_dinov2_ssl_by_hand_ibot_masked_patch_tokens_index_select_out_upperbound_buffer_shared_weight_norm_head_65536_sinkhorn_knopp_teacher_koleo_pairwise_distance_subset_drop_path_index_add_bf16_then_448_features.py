"""DINOv2's self-supervised training step written the way facebookresearch/dinov2 writes it
(train/ssl_meta_arch.py `forward_backward`, data/collate.py, loss/dino_clstoken_loss.py,
ibot_patch_loss.py, koleo_loss.py, layers/block.py, models/vision_transformer.py), without xformers: a
ViT-B/14 with 4 register tokens, LayerScale and DINOv2's batch-subset stochastic depth (rate 0.3: each
residual computed on `randperm(b)[:int(b * 0.7)]` of the batch and added back by
`torch.index_add(x.flatten(1), 0, brange, residual, alpha=b / subset)`), mask tokens put in by
`torch.where(masks[..., None], mask_token, x)`, and position embeddings interpolated bicubically with
DINOv2's 0.1 offset for the 98-pixel local crops. The collate step runs on the CPU with a seeded
generator: half of the 2 x 32 global crops masked at ratios spread over (0.1, 0.5), the masks' flat
indices by `nonzero()`, per-token `masks_weight` by a boolean index, and the `upperbound` of masked
tokens (sizes fixed by the collate, moved to the GPU with `non_blocking=True`). Teacher (built apart
without drop path, `load_state_dict` of the student's, then an EMA) under no_grad: its cls tokens
swapped between the two global crops and copied into a zero buffer of `upperbound + 64` rows, the masked
patch tokens written into the rest of it by `torch.index_select(..., out=buffer[64:64 + n_masked])`, one
pass through the shared DINO head (MLP 768-2048-2048-256, L2 normalisation, `nn.utils.weight_norm` last
layer of 65,536 prototypes with `weight_g` filled with 1), then Sinkhorn-Knopp centering (3 iterations,
fp32, temperature 0.04) for the cls and the masked patch outputs. Student: the 2 x 32 masked global
crops and 8 x 32 local crops (98 x 98 at patch 14: 7 x 7 tokens), its local cls, global cls and masked
patch tokens (a zero buffer of `upperbound` rows, `index_select` copied in) concatenated through the
same head and split again; DINO loss over crop pairs, iBOT loss weighted by `masks_weight`, KoLeo on the
student's backbone cls tokens (`torch.mm(x, x.t())`, the diagonal filled through `dots.view(-1)[::n +
1]`, `torch.max`, `nn.PairwiseDistance`) with autocast off. bf16 autocast, AdamW with layer-wise lr
decay 0.9 and no weight decay for norms, biases and tokens, the last layer's gradients dropped during
the first epoch, gradient clipping at 3.0 per module, the teacher updated by `torch._foreach_mul_` /
`_foreach_add_` (momentum 0.992). 3 steps. Then the teacher backbone's normalised cls and patch features
of 64 images at 448 x 448 (32 x 32 patches, the embedding interpolated) under inference_mode. Fixed
sizes. 2 phases after the model and the end."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2715)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


D, DEPTH, HEADS, PATCH, IMG, REG = 768, 12, 12, 14, 224, 4
OUT, HIDDEN, BOTTLENECK = 65536, 2048, 256
BATCH, N_GLOBAL, N_LOCAL, LOCAL = 32, 2, 8, 98
DROP_PATH, LAYER_DECAY = 0.3, 0.9


def drop_add_residual_stochastic_depth(x, residual_func, sample_drop_ratio):
    b, _n, _d = x.shape
    sample_subset_size = max(int(b * (1 - sample_drop_ratio)), 1)
    brange = (torch.randperm(b, device=x.device))[:sample_subset_size]
    x_subset = x[brange]
    residual = residual_func(x_subset)
    x_flat = x.flatten(1)
    residual = residual.flatten(1)
    residual_scale_factor = b / sample_subset_size
    x_plus_residual = torch.index_add(
        x_flat, 0, brange, residual.to(dtype=x.dtype), alpha=residual_scale_factor
    )
    return x_plus_residual.view_as(x)


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, HEADS, c // HEADS).permute(2, 0, 3, 1, 4)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Block(nn.Module):
    def __init__(self, drop_path):
        super().__init__()
        self.norm1 = nn.LayerNorm(D, eps=1e-6)
        self.attn = Attention()
        self.ls1 = LayerScale(D)
        self.norm2 = nn.LayerNorm(D, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.ls2 = LayerScale(D)
        self.sample_drop_ratio = drop_path

    def forward(self, x):
        def attn_residual_func(x):
            return self.ls1(self.attn(self.norm1(x)))

        def ffn_residual_func(x):
            return self.ls2(self.mlp(self.norm2(x)))

        if self.training and self.sample_drop_ratio > 0.1:
            x = drop_add_residual_stochastic_depth(x, attn_residual_func, self.sample_drop_ratio)
            x = drop_add_residual_stochastic_depth(x, ffn_residual_func, self.sample_drop_ratio)
        else:
            x = x + attn_residual_func(x)
            x = x + ffn_residual_func(x)
        return x


class DinoVisionTransformer(nn.Module):
    def __init__(self, drop_path):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, D, PATCH, PATCH)
        n = (IMG // PATCH) ** 2
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, D) * 0.02)
        self.register_tokens = nn.Parameter(torch.zeros(1, REG, D))
        self.mask_token = nn.Parameter(torch.zeros(1, D))
        self.blocks = nn.ModuleList(Block(drop_path) for _ in range(DEPTH))
        self.norm = nn.LayerNorm(D, eps=1e-6)

    def interpolate_pos_encoding(self, x, w, h):
        previous_dtype = x.dtype
        npatch = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        pos_embed = self.pos_embed.float()
        class_pos_embed = pos_embed[:, 0]
        patch_pos_embed = pos_embed[:, 1:]
        w0, h0 = w // PATCH, h // PATCH
        M = int(math.sqrt(N))
        sx, sy = float(w0 + 0.1) / M, float(h0 + 0.1) / M
        patch_pos_embed = F.interpolate(
            patch_pos_embed.reshape(1, M, M, D).permute(0, 3, 1, 2),
            scale_factor=(sx, sy),
            mode="bicubic",
            antialias=False,
        )
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, D)
        return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1).to(previous_dtype)

    def forward(self, x, masks=None):
        _b, _, w, h = x.shape
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        if masks is not None:
            x = torch.where(masks.unsqueeze(-1), self.mask_token.to(x.dtype).unsqueeze(0), x)
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        x = x + self.interpolate_pos_encoding(x, w, h)
        x = torch.cat((x[:, :1], self.register_tokens.expand(x.shape[0], -1, -1), x[:, 1:]), dim=1)
        for blk in self.blocks:
            x = blk(x)
        x_norm = self.norm(x)
        return {"x_norm_clstoken": x_norm[:, 0], "x_norm_patchtokens": x_norm[:, REG + 1 :]}


class DINOHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(D, HIDDEN),
            nn.GELU(),
            nn.Linear(HIDDEN, HIDDEN),
            nn.GELU(),
            nn.Linear(HIDDEN, BOTTLENECK),
        )
        self.last_layer = nn.utils.weight_norm(nn.Linear(BOTTLENECK, OUT, bias=False))
        self.last_layer.weight_g.data.fill_(1)

    def forward(self, x):
        x = self.mlp(x)
        eps = 1e-6 if x.dtype == torch.float16 else 1e-12
        x = F.normalize(x, dim=-1, p=2, eps=eps)
        return self.last_layer(x)


class SSL(nn.Module):
    def __init__(self, drop_path):
        super().__init__()
        self.backbone = DinoVisionTransformer(drop_path)
        self.dino_head = DINOHead()


@torch.no_grad()
def sinkhorn_knopp_teacher(teacher_output, teacher_temp, n=None, n_iterations=3):
    teacher_output = teacher_output.float()
    Q = torch.exp(teacher_output / teacher_temp).t()
    B = Q.shape[1] if n is None else n
    K = Q.shape[0]
    sum_Q = torch.sum(Q)
    Q /= sum_Q
    for _ in range(n_iterations):
        sum_of_rows = torch.sum(Q, dim=1, keepdim=True)
        Q /= sum_of_rows
        Q /= K
        Q /= torch.sum(Q, dim=0, keepdim=True)
        Q /= B
    Q *= B
    return Q.t()


def dino_loss(student_output_list, teacher_list, student_temp=0.1):
    total_loss = 0
    for s in student_output_list:
        lsm = F.log_softmax(s / student_temp, dim=-1)
        for t in teacher_list:
            total_loss -= torch.sum(t * lsm, dim=-1).mean()
    return total_loss


def ibot_forward_masked(s, t, student_masks_flat, masks_weight, student_temp=0.1):
    loss = torch.sum(t * F.log_softmax(s / student_temp, dim=-1), dim=-1)
    loss = loss * masks_weight
    return -loss.sum() / student_masks_flat.shape[0]


class KoLeoLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.pdist = nn.PairwiseDistance(2, eps=1e-8)

    def pairwise_NNs_inner(self, x):
        dots = torch.mm(x, x.t())
        n = x.shape[0]
        dots.view(-1)[:: (n + 1)].fill_(-1)
        _, I = torch.max(dots, dim=1)  # noqa: E741 (dinov2's names)
        return I

    def forward(self, student_output, eps=1e-8):
        with torch.autocast("cuda", enabled=False):
            student_output = F.normalize(student_output, eps=eps, p=2, dim=-1)
            I = self.pairwise_NNs_inner(student_output)  # noqa: E741
            distances = self.pdist(student_output, student_output[I])
            return -torch.log(distances + eps).mean()


cpu = torch.Generator().manual_seed(5)


def collate_masks(n_images, n_tokens, mask_ratio=(0.1, 0.5), mask_probability=0.5):
    n_samples_masked = int(n_images * mask_probability)
    probs = torch.linspace(*mask_ratio, n_samples_masked + 1)
    upperbound = 0
    masks_list = []
    for i in range(n_samples_masked):
        lo, hi = float(probs[i]), float(probs[i + 1])
        k = int(n_tokens * (lo + (hi - lo) * float(torch.rand((), generator=cpu))))
        m = torch.zeros(n_tokens, dtype=torch.bool)
        m[torch.randperm(n_tokens, generator=cpu)[:k]] = True
        masks_list.append(m)
        upperbound += int(n_tokens * hi)
    for _ in range(n_samples_masked, n_images):
        masks_list.append(torch.zeros(n_tokens, dtype=torch.bool))
    order = torch.randperm(n_images, generator=cpu).tolist()
    collated_masks = torch.stack([masks_list[i] for i in order])
    mask_indices_list = collated_masks.flatten().nonzero().flatten()
    masks_weight = (
        (1 / collated_masks.sum(-1).clamp(min=1.0)).unsqueeze(-1).expand_as(collated_masks)[collated_masks]
    )
    return collated_masks, mask_indices_list, masks_weight, upperbound


student = SSL(DROP_PATH).to(dev)
# built apart and loaded from the student, as ssl_meta_arch does (a weight_norm module cannot be deepcopied)
teacher = SSL(0.0).to(dev)
teacher.load_state_dict(student.state_dict())
for p in teacher.parameters():
    p.requires_grad_(False)


def param_groups(model):
    groups = []
    for name, p in model.named_parameters():
        layer = DEPTH + 1
        if name.startswith("backbone.blocks."):
            layer = int(name.split(".")[2]) + 1
        elif name.startswith("backbone.") and "norm." not in name:
            layer = 0
        lr_mult = LAYER_DECAY ** (DEPTH + 1 - layer) if name.startswith("backbone.") else 1.0
        no_wd = (
            p.ndim == 1
            or "token" in name
            or "pos_embed" in name
            or name.endswith(".bias")
            or "weight_g" in name
        )
        groups.append(
            {"params": [p], "lr": 4e-4 * lr_mult, "weight_decay": 0.0 if no_wd else 0.04, "name": name}
        )
    return groups


opt = torch.optim.AdamW(param_groups(student), betas=(0.9, 0.999))
koleo = KoLeoLoss()
print(sum(p.numel() for p in student.parameters()) / 1e6, "M student parameters")
report("student_teacher_built")

n_tokens = (IMG // PATCH) ** 2
for step in range(3):
    masks, mask_indices_list, masks_weight, upperbound = collate_masks(N_GLOBAL * BATCH, n_tokens)
    masks = masks.to(dev, non_blocking=True)
    mask_indices_list = mask_indices_list.to(dev, non_blocking=True)
    masks_weight = masks_weight.to(dev, non_blocking=True)
    n_masked_patches = mask_indices_list.shape[0]
    global_crops = torch.randn(N_GLOBAL * BATCH, 3, IMG, IMG, device=dev)
    local_crops = torch.randn(N_LOCAL * BATCH, 3, LOCAL, LOCAL, device=dev)

    with torch.autocast("cuda", dtype=torch.bfloat16):
        with torch.no_grad():
            t_out = teacher.backbone(global_crops)
            teacher_cls_tokens = t_out["x_norm_clstoken"].chunk(N_GLOBAL)
            teacher_cls_tokens = torch.cat((teacher_cls_tokens[1], teacher_cls_tokens[0]))
            ibot_teacher_patch_tokens = t_out["x_norm_patchtokens"]
            n_cls_tokens = teacher_cls_tokens.shape[0]
            buffer_tensor_teacher = ibot_teacher_patch_tokens.new_zeros(upperbound + n_cls_tokens, D)
            buffer_tensor_teacher[:n_cls_tokens].copy_(teacher_cls_tokens)
            torch.index_select(
                ibot_teacher_patch_tokens.flatten(0, 1),
                dim=0,
                index=mask_indices_list,
                out=buffer_tensor_teacher[n_cls_tokens : n_cls_tokens + n_masked_patches],
            )
            tokens_after_head = teacher.dino_head(buffer_tensor_teacher)
            teacher_cls_after_head = tokens_after_head[:n_cls_tokens]
            masked_teacher_patch_after_head = tokens_after_head[
                n_cls_tokens : n_cls_tokens + n_masked_patches
            ]
            teacher_dino = sinkhorn_knopp_teacher(teacher_cls_after_head, 0.04).view(N_GLOBAL, -1, OUT)
            teacher_ibot = sinkhorn_knopp_teacher(masked_teacher_patch_after_head, 0.04, n=n_masked_patches)

        s_global = student.backbone(global_crops, masks=masks)
        s_local = student.backbone(local_crops)
        student_global_cls_tokens = s_global["x_norm_clstoken"]
        ibot_student_patch_tokens = s_global["x_norm_patchtokens"]
        buffer_tensor_patch_tokens = ibot_student_patch_tokens.new_zeros(upperbound, D)
        buffer_tensor_patch_tokens[:n_masked_patches].copy_(
            torch.index_select(ibot_student_patch_tokens.flatten(0, 1), dim=0, index=mask_indices_list)
        )
        inputs = [s_local["x_norm_clstoken"], student_global_cls_tokens, buffer_tensor_patch_tokens]
        outputs = student.dino_head(torch.cat(inputs, dim=0)).split([t.shape[0] for t in inputs], dim=0)
        s_local_after_head, s_global_after_head, s_patch_after_head = outputs
        s_patch_after_head = s_patch_after_head[:n_masked_patches]

        n_terms = N_GLOBAL * N_LOCAL + N_GLOBAL * (N_GLOBAL - 1)
        loss_local = dino_loss(s_local_after_head.chunk(N_LOCAL), list(teacher_dino)) / n_terms
        loss_global = dino_loss([s_global_after_head], [teacher_dino.flatten(0, 1)]) * 2 / n_terms
        loss_koleo = 0.1 * sum(koleo(p) for p in student_global_cls_tokens.chunk(2))
        loss_ibot = ibot_forward_masked(s_patch_after_head, teacher_ibot, masks, masks_weight) * 2 * 1.0
        loss = loss_local + loss_global + loss_koleo + loss_ibot
    loss.backward()
    for p in student.dino_head.last_layer.parameters():
        p.grad = None  # freeze_last_layer_epochs: the first epoch
    for module in (student.backbone, student.dino_head):
        nn.utils.clip_grad_norm_(module.parameters(), 3.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    with torch.no_grad():
        m = 0.992
        t_params = [p for p in teacher.parameters()]
        s_params = [p for p in student.parameters()]
        torch._foreach_mul_(t_params, m)
        torch._foreach_add_(t_params, s_params, alpha=1 - m)
    print(step, n_masked_patches, upperbound, round(loss.item(), 4))
report("train_dinov2_ibot_koleo_3_steps")

teacher.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    imgs = torch.randn(64, 3, 448, 448, device=dev)
    out = teacher.backbone(imgs)
    feats = torch.cat([out["x_norm_clstoken"], out["x_norm_patchtokens"].mean(1)], dim=-1)
print("features", tuple(feats.shape), tuple(out["x_norm_patchtokens"].shape))
report("inference_mode_teacher_features_448")
print("done")
