"""A Segment-Anything model written by hand after facebookresearch/segment-anything's modeling/: the
ViT-B image encoder at 1024 x 1024 (patch 16, width 768, 12 blocks, 14 x 14 windows padded from the
64 x 64 grid, global attention in blocks 2/5/8/11, decomposed relative position biases added to
explicit q @ k^T scores, a 256-channel neck with LayerNorm2d), the prompt encoder (random Fourier
positional encoding, box corners) and the mask decoder (two-way transformer of depth 2 with
downsampled cross-attention, transposed-conv upscaling, hypernetwork MLPs, IoU head); a MedSAM-style
fine-tune of the encoder and mask decoder with the prompt encoder frozen, 4 box prompts per image
(image embeddings repeat_interleave'd per prompt), batch 2 under bf16 autocast, dice + BCE + IoU
MSE, AdamW, 3 steps; then point prompts with multimask output on 2 images, masks upsampled to the
input size, under inference_mode; 5 phases."""

import itertools
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12002)
IMG, D, DEPTH, HEADS, B, NBOX = (256, 96, 4, 4, 1, 2) if SMALL else (1024, 768, 12, 12, 2, 4)
GLOBAL = (1, 3) if SMALL else (2, 5, 8, 11)
WIN, PD = 14, 256
GRID = IMG // 16
device = "cuda" if torch.cuda.is_available() else "cpu"


class LayerNorm2d(nn.Module):
    def __init__(self, c, eps=1e-6):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c)), eps

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def get_rel_pos(q_size, k_size, rel_pos):
    q_coords = torch.arange(q_size, device=rel_pos.device)[:, None] * max(k_size / q_size, 1.0)
    k_coords = torch.arange(k_size, device=rel_pos.device)[None, :] * max(q_size / k_size, 1.0)
    relative_coords = (q_coords - k_coords) + (k_size - 1) * max(q_size / k_size, 1.0)
    return rel_pos[relative_coords.long()]


def add_decomposed_rel_pos(attn, q, rel_pos_h, rel_pos_w, size):
    h, w = size
    rh, rw = get_rel_pos(h, h, rel_pos_h), get_rel_pos(w, w, rel_pos_w)
    b, _, dim = q.shape
    r_q = q.reshape(b, h, w, dim)
    rel_h = torch.einsum("bhwc,hkc->bhwk", r_q, rh)
    rel_w = torch.einsum("bhwc,wkc->bhwk", r_q, rw)
    return (attn.view(b, h, w, h, w) + rel_h[:, :, :, :, None] + rel_w[:, :, :, None, :]).view(
        b, h * w, h * w
    )


class EncAttention(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.heads, hd = HEADS, D // HEADS
        self.scale = hd**-0.5
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.rel_pos_h = nn.Parameter(torch.zeros(2 * size - 1, hd))
        self.rel_pos_w = nn.Parameter(torch.zeros(2 * size - 1, hd))

    def forward(self, x):
        b, h, w, _ = x.shape
        qkv = self.qkv(x).reshape(b, h * w, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.reshape(3, b * self.heads, h * w, -1).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = add_decomposed_rel_pos(attn, q, self.rel_pos_h, self.rel_pos_w, (h, w))
        attn = attn.softmax(dim=-1)
        x = (attn @ v).view(b, self.heads, h, w, -1).permute(0, 2, 3, 1, 4).reshape(b, h, w, -1)
        return self.proj(x)


class EncBlock(nn.Module):
    def __init__(self, window):
        super().__init__()
        self.window = window
        self.norm1, self.norm2 = nn.LayerNorm(D, eps=1e-6), nn.LayerNorm(D, eps=1e-6)
        self.attn = EncAttention(window if window else GRID)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x):
        shortcut = x
        x = self.norm1(x)
        if self.window:
            h, w = x.shape[1], x.shape[2]
            ph, pw = (WIN - h % WIN) % WIN, (WIN - w % WIN) % WIN
            x = F.pad(x, (0, 0, 0, pw, 0, ph))
            hp, wp = h + ph, w + pw
            b, c = x.shape[0], x.shape[-1]
            x = (
                x.view(b, hp // WIN, WIN, wp // WIN, WIN, c)
                .permute(0, 1, 3, 2, 4, 5)
                .contiguous()
                .view(-1, WIN, WIN, c)
            )
            x = self.attn(x)
            x = (
                x.view(b, hp // WIN, wp // WIN, WIN, WIN, -1)
                .permute(0, 1, 3, 2, 4, 5)
                .contiguous()
                .view(b, hp, wp, -1)
            )
            x = x[:, :h, :w, :].contiguous()
        else:
            x = self.attn(x)
        x = shortcut + x
        return x + self.mlp(self.norm2(x))


class ImageEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, D, 16, 16)
        self.pos_embed = nn.Parameter(torch.zeros(1, GRID, GRID, D))
        self.blocks = nn.ModuleList(EncBlock(0 if i in GLOBAL else WIN) for i in range(DEPTH))
        self.neck = nn.Sequential(
            nn.Conv2d(D, PD, 1, bias=False),
            LayerNorm2d(PD),
            nn.Conv2d(PD, PD, 3, padding=1, bias=False),
            LayerNorm2d(PD),
        )

    def forward(self, x):
        x = self.patch_embed(x).permute(0, 2, 3, 1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.neck(x.permute(0, 3, 1, 2))


class PromptEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("gauss", torch.randn(2, PD // 2))
        self.point_embeddings = nn.ModuleList(nn.Embedding(1, PD) for _ in range(4))
        self.not_a_point = nn.Embedding(1, PD)
        self.no_mask_embed = nn.Embedding(1, PD)

    def pe(self, coords):
        coords = (2 * coords - 1) @ self.gauss
        coords = 2 * math.pi * coords
        return torch.cat([torch.sin(coords), torch.cos(coords)], dim=-1)

    def dense_pe(self):
        grid = torch.ones((GRID, GRID), device=self.gauss.device)
        y = (grid.cumsum(0) - 0.5) / GRID
        x = (grid.cumsum(1) - 0.5) / GRID
        return self.pe(torch.stack([x, y], dim=-1)).permute(2, 0, 1).unsqueeze(0)

    def forward(self, points=None, boxes=None):
        if boxes is not None:
            coords = (boxes + 0.5).reshape(-1, 2, 2) / IMG
            sparse = self.pe(coords)
            sparse[:, 0, :] += self.point_embeddings[2].weight
            sparse[:, 1, :] += self.point_embeddings[3].weight
        else:
            pts, labels = points
            pts = torch.cat([pts + 0.5, torch.zeros_like(pts[:, :1])], 1)
            labels = torch.cat([labels, -torch.ones_like(labels[:, :1])], 1)
            sparse = self.pe(pts / IMG)
            sparse[labels == -1] = 0.0
            sparse[labels == -1] += self.not_a_point.weight
            sparse[labels == 0] += self.point_embeddings[0].weight
            sparse[labels == 1] += self.point_embeddings[1].weight
        dense = self.no_mask_embed.weight.reshape(1, -1, 1, 1).expand(sparse.shape[0], -1, GRID, GRID)
        return sparse, dense


class DecAttention(nn.Module):
    def __init__(self, down=1):
        super().__init__()
        self.inner, self.heads = PD // down, 8
        self.q_proj, self.k_proj, self.v_proj = (nn.Linear(PD, self.inner) for _ in range(3))
        self.out_proj = nn.Linear(self.inner, PD)

    def sep(self, x):
        b, n, c = x.shape
        return x.reshape(b, n, self.heads, c // self.heads).transpose(1, 2)

    def forward(self, q, k, v):
        q, k, v = self.sep(self.q_proj(q)), self.sep(self.k_proj(k)), self.sep(self.v_proj(v))
        attn = (q @ k.permute(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
        out = torch.softmax(attn, dim=-1) @ v
        b, h, n, c = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, n, h * c))


class TwoWayBlock(nn.Module):
    def __init__(self, skip_first_pe):
        super().__init__()
        self.self_attn, self.t2i, self.i2t = DecAttention(), DecAttention(2), DecAttention(2)
        self.norm1, self.norm2, self.norm3, self.norm4 = (nn.LayerNorm(PD) for _ in range(4))
        self.mlp = nn.Sequential(nn.Linear(PD, 2048), nn.ReLU(), nn.Linear(2048, PD))
        self.skip_first_pe = skip_first_pe

    def forward(self, queries, keys, query_pe, key_pe):
        if self.skip_first_pe:
            queries = self.self_attn(queries, queries, queries)
        else:
            q = queries + query_pe
            queries = queries + self.self_attn(q, q, queries)
        queries = self.norm1(queries)
        q, k = queries + query_pe, keys + key_pe
        queries = self.norm2(queries + self.t2i(q, k, keys))
        queries = self.norm3(queries + self.mlp(queries))
        q, k = queries + query_pe, keys + key_pe
        keys = self.norm4(keys + self.i2t(k, q, queries))
        return queries, keys


class MLP(nn.Sequential):
    def __init__(self, i, h, o, n):
        dims = [i] + [h] * (n - 1)
        layers = []
        for a, b_ in itertools.pairwise(dims):
            layers += [nn.Linear(a, b_), nn.ReLU()]
        super().__init__(*layers, nn.Linear(dims[-1], o))


class MaskDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([TwoWayBlock(True), TwoWayBlock(False)])
        self.final_attn, self.norm_final = DecAttention(2), nn.LayerNorm(PD)
        self.iou_token, self.mask_tokens = nn.Embedding(1, PD), nn.Embedding(4, PD)
        self.output_upscaling = nn.Sequential(
            nn.ConvTranspose2d(PD, PD // 4, 2, 2),
            LayerNorm2d(PD // 4),
            nn.GELU(),
            nn.ConvTranspose2d(PD // 4, PD // 8, 2, 2),
            nn.GELU(),
        )
        self.hyper = nn.ModuleList(MLP(PD, PD, PD // 8, 3) for _ in range(4))
        self.iou_head = MLP(PD, 256, 4, 3)

    def forward(self, image_embeddings, image_pe, sparse, dense, multimask):
        tokens = (
            torch.cat([self.iou_token.weight, self.mask_tokens.weight], 0)
            .unsqueeze(0)
            .expand(sparse.shape[0], -1, -1)
        )
        tokens = torch.cat((tokens, sparse), dim=1)
        src = (
            torch.repeat_interleave(image_embeddings, tokens.shape[0] // image_embeddings.shape[0], dim=0)
            + dense
        )
        pos_src = torch.repeat_interleave(image_pe, tokens.shape[0], dim=0)
        b, c, h, w = src.shape
        keys, key_pe, queries = src.flatten(2).permute(0, 2, 1), pos_src.flatten(2).permute(0, 2, 1), tokens
        for layer in self.layers:
            queries, keys = layer(queries, keys, tokens, key_pe)
        queries = self.norm_final(queries + self.final_attn(queries + tokens, keys + key_pe, keys))
        iou_out, mask_out = queries[:, 0, :], queries[:, 1:5, :]
        up = self.output_upscaling(keys.transpose(1, 2).view(b, c, h, w))
        hyper_in = torch.stack([self.hyper[i](mask_out[:, i, :]) for i in range(4)], dim=1)
        b, c, h, w = up.shape
        masks = (hyper_in @ up.view(b, c, h * w)).view(b, -1, h, w)
        iou = self.iou_head(iou_out)
        sl = slice(1, None) if multimask else slice(0, 1)
        return masks[:, sl], iou[:, sl]


class SAM(nn.Module):
    def __init__(self):
        super().__init__()
        self.image_encoder, self.prompt_encoder, self.mask_decoder = (
            ImageEncoder(),
            PromptEncoder(),
            MaskDecoder(),
        )


def dice_bce(logits, gt):
    p = logits.sigmoid()
    inter = (p * gt).flatten(1).sum(-1)
    dice = 1 - (2 * inter + 1e-5) / (p.flatten(1).sum(-1) + gt.flatten(1).sum(-1) + 1e-5)
    return dice.mean() + F.binary_cross_entropy_with_logits(logits, gt)


sam = SAM().to(device)
sam.prompt_encoder.requires_grad_(False)
params = [p for p in sam.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

sam.train()
for step in range(STEPS := 3):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    xy0 = torch.rand(B * NBOX, 2, device=device) * IMG * 0.6
    boxes = torch.cat([xy0, xy0 + IMG * 0.1 + torch.rand(B * NBOX, 2, device=device) * IMG * 0.3], 1)
    gt = (torch.rand(B * NBOX, 1, 4 * GRID, 4 * GRID, device=device) > 0.7).float()
    with torch.autocast(device, dtype=torch.bfloat16):
        emb = sam.image_encoder(images)
        with torch.no_grad():
            sparse, dense = sam.prompt_encoder(boxes=boxes)
        masks, iou = sam.mask_decoder(emb, sam.prompt_encoder.dense_pe(), sparse, dense, multimask=False)
    masks = masks.float()
    with torch.no_grad():
        hard = (masks > 0).float()
        true_iou = (hard * gt).flatten(1).sum(-1) / ((hard + gt).clamp(max=1).flatten(1).sum(-1) + 1e-6)
    loss = dice_bce(masks, gt) + F.mse_loss(iou.float().squeeze(1), true_iou)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del images, boxes, gt, emb, masks, iou, loss, hard, true_iou

sam.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    images = torch.randn(B, 3, IMG, IMG, device=device)
    emb = sam.image_encoder(images)
    pts = torch.rand(B, 3, 2, device=device) * IMG
    labels = torch.randint(0, 2, (B, 3), device=device)
    sparse, dense = sam.prompt_encoder(points=(pts, labels))
    masks, iou = sam.mask_decoder(emb, sam.prompt_encoder.dense_pe(), sparse, dense, multimask=True)
    masks = F.interpolate(masks.float(), (IMG, IMG), mode="bilinear", align_corners=False) > 0.0
if device == "cuda":
    print(
        f"eval masks {tuple(masks.shape)} iou {iou.float().mean().item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
