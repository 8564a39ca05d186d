"""MAE pre-training after facebookresearch/mae (models_mae.py), with timm's PatchEmbed and Block.

Model: MaskedAutoencoderViT, encoder ViT-B/16 at 224 px (768 wide, 12 blocks of 12 heads, MLP ratio 4,
fixed 2-D sin-cos position embeddings as frozen parameters, [CLS] token), decoder 512 wide with 8
blocks of 16 heads and a mask token, prediction 16 * 16 * 3 pixels per patch. Per-sample random
masking of 75 % of the 196 patches by argsort of uniform noise (ids_restore by a second argsort, visible
tokens gathered), the encoder running on the 49 visible patches only, the decoder on all 196 after
unshuffling with gather; loss: mean squared error against per-patch normalised pixels (norm_pix_loss)
on the masked patches only. bf16 autocast, AdamW (lr 1.5e-4 * 256 / 256, betas (0.9, 0.95), weight
decay 0.05 on weights only, foreach default), gradient accumulation over 2 micro-batches of 128 images
drawn on the device (loss / 2).

Phases: the first optimizer step (2 micro-batches, AdamW state created); 2 more steps; reconstruction of
32 images under torch.inference_mode (unpatchify, masked patches pasted back, MSE per image); a linear
probe of the frozen encoder (requires_grad_(False), all 196 patches, [CLS] features under no_grad and
bf16 autocast) with BatchNorm1d(affine=False) + Linear 768 -> 1000 trained 3 steps at batch 256 with
SGD momentum 0.9. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.models.vision_transformer import Block, PatchEmbed

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2034)
if SMALL:
    B, RES, DEPTH, DEC_DEPTH, STEPS, VIS, PROBE_B = 4, 64, 2, 1, 1, 4, 8
else:
    B, RES, DEPTH, DEC_DEPTH, STEPS, VIS, PROBE_B = 128, 224, 12, 8, 2, 32, 256
ACCUM, PATCH, MASK_RATIO = 2, 16, 0.75
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


def get_2d_sincos_pos_embed(dim, grid, cls_token=False):
    gh, gw = torch.meshgrid(torch.arange(grid, dtype=torch.float64), torch.arange(grid, dtype=torch.float64), indexing="xy")

    def one_d(d, pos):
        omega = 1.0 / 10000 ** (torch.arange(d // 2, dtype=torch.float64) / (d / 2.0))
        out = pos.reshape(-1)[:, None] * omega[None]
        return torch.cat([torch.sin(out), torch.cos(out)], dim=1)

    emb = torch.cat([one_d(dim // 2, gh), one_d(dim // 2, gw)], dim=1)
    if cls_token:
        emb = torch.cat([torch.zeros(1, dim, dtype=torch.float64), emb], dim=0)
    return emb.float()


class MaskedAutoencoderViT(nn.Module):
    def __init__(self, img_size=224, patch_size=16, embed_dim=768, depth=12, num_heads=12, decoder_embed_dim=512,
                 decoder_depth=8, decoder_num_heads=16, mlp_ratio=4.0, norm_pix_loss=True):
        super().__init__()
        self.patch_embed = PatchEmbed(img_size, patch_size, 3, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim), requires_grad=False)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio, qkv_bias=True, norm_layer=nn.LayerNorm) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim)
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim, bias=True)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.decoder_pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, decoder_embed_dim), requires_grad=False)
        self.decoder_blocks = nn.ModuleList(
            [Block(decoder_embed_dim, decoder_num_heads, mlp_ratio, qkv_bias=True, norm_layer=nn.LayerNorm) for _ in range(decoder_depth)]
        )
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size**2 * 3, bias=True)
        self.norm_pix_loss = norm_pix_loss
        grid = int(num_patches**0.5)
        self.pos_embed.data.copy_(get_2d_sincos_pos_embed(embed_dim, grid, True).unsqueeze(0))
        self.decoder_pos_embed.data.copy_(get_2d_sincos_pos_embed(decoder_embed_dim, grid, True).unsqueeze(0))
        torch.nn.init.normal_(self.cls_token, std=0.02)
        torch.nn.init.normal_(self.mask_token, std=0.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.constant_(m.bias, 0)
        elif isinstance(m, nn.LayerNorm):
            nn.init.constant_(m.bias, 0)
            nn.init.constant_(m.weight, 1.0)

    def patchify(self, imgs):
        p = PATCH
        h = w = imgs.shape[2] // p
        x = imgs.reshape(imgs.shape[0], 3, h, p, w, p)
        x = torch.einsum("nchpwq->nhwpqc", x)
        return x.reshape(imgs.shape[0], h * w, p**2 * 3)

    def unpatchify(self, x):
        p = PATCH
        h = w = int(x.shape[1] ** 0.5)
        x = x.reshape(x.shape[0], h, w, p, p, 3)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], 3, h * p, h * p)

    def random_masking(self, x, mask_ratio):
        N, L, D = x.shape
        len_keep = int(L * (1 - mask_ratio))
        noise = torch.rand(N, L, device=x.device)
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :len_keep]
        x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))
        mask = torch.ones([N, L], device=x.device)
        mask[:, :len_keep] = 0
        mask = torch.gather(mask, dim=1, index=ids_restore)
        return x_masked, mask, ids_restore

    def forward_encoder(self, x, mask_ratio):
        x = self.patch_embed(x)
        x = x + self.pos_embed[:, 1:, :]
        x, mask, ids_restore = self.random_masking(x, mask_ratio)
        cls_token = self.cls_token + self.pos_embed[:, :1, :]
        x = torch.cat((cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x), mask, ids_restore

    def forward_decoder(self, x, ids_restore):
        x = self.decoder_embed(x)
        mask_tokens = self.mask_token.repeat(x.shape[0], ids_restore.shape[1] + 1 - x.shape[1], 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1)
        x = x + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x)
        x = self.decoder_norm(x)
        return self.decoder_pred(x)[:, 1:, :]

    def forward_loss(self, imgs, pred, mask):
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = (pred - target) ** 2
        loss = loss.mean(dim=-1)
        return (loss * mask).sum() / mask.sum()

    def forward(self, imgs, mask_ratio=0.75):
        latent, mask, ids_restore = self.forward_encoder(imgs, mask_ratio)
        pred = self.forward_decoder(latent, ids_restore)
        loss = self.forward_loss(imgs, pred, mask)
        return loss, pred, mask


model = MaskedAutoencoderViT(img_size=RES, depth=DEPTH, decoder_depth=DEC_DEPTH).to(device)
decay, no_decay = [], []
for name, p in model.named_parameters():
    if not p.requires_grad:
        continue
    (no_decay if p.ndim == 1 or name in ("cls_token", "mask_token") else decay).append(p)
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}], lr=1.5e-4 * B * ACCUM / 256, betas=(0.9, 0.95)
)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def train_step():
    model.train()
    for _ in range(ACCUM):
        imgs = (torch.rand(B, 3, RES, RES, device=device) - 0.45) / 0.25
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss, _, _ = model(imgs, mask_ratio=MASK_RATIO)
        (loss / ACCUM).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"step 0 loss {train_step():.4f}")
report("first step")
for step in range(STEPS):
    loss = train_step()
    print(f"step {step + 1} loss {loss:.4f}")
report("train")

model.eval()
with torch.inference_mode():
    imgs = (torch.rand(VIS, 3, RES, RES, device=device) - 0.45) / 0.25
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss, pred, mask = model(imgs, mask_ratio=MASK_RATIO)
    pred = model.unpatchify(pred.float())
    mask = model.unpatchify(mask.unsqueeze(-1).repeat(1, 1, PATCH**2 * 3))
    pasted = imgs * (1 - mask) + pred * mask
    per_image = ((pasted - imgs) ** 2).mean(dim=(1, 2, 3))
print(f"reconstruction loss {loss.item():.4f} per-image mse {per_image.mean().item():.4f}")
report("reconstruction")

model.requires_grad_(False)
head = nn.Sequential(nn.BatchNorm1d(768, affine=False, eps=1e-6), nn.Linear(768, 1000)).to(device)
nn.init.trunc_normal_(head[1].weight, std=0.01)
probe_opt = torch.optim.SGD(head.parameters(), lr=0.1, momentum=0.9)
for step in range(3):
    imgs = (torch.rand(PROBE_B, 3, RES, RES, device=device) - 0.45) / 0.25
    labels = torch.randint(0, 1000, (PROBE_B,), device=device)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        latent, _, _ = model.forward_encoder(imgs, mask_ratio=0.0)
    loss = F.cross_entropy(head(latent[:, 0].float()), labels)
    probe_opt.zero_grad()
    loss.backward()
    probe_opt.step()
print(f"probe loss {loss.item():.4f}")
if device == "cuda":
    print(f"probe allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
