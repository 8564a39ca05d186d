"""Slot Attention object discovery written the way the paper's released code (google-research
slot_attention, and its common PyTorch ports) writes it: a CNN encoder of four 5x5 convolutions of 64
channels at 128 x 128 (CLEVR6-like inputs, synthetic here), a soft position embedding (a Linear over
the 4-channel grid (x, y, 1-x, 1-y) added to the feature map), LayerNorm and an MLP over the 16,384
flattened positions, then Slot Attention: 7 slots drawn as mu + sigma * randn, 3 iterations of
LayerNorm'd queries against the inputs' keys, the softmax taken over the *slots* axis (dim=1 of
(B, K, N)), eps added and renormalised over the inputs as a weighted mean, an nn.GRUCell on the
(B*K, 64) updates and a residual MLP. The spatial-broadcast decoder tiles every slot to (B*K, 64, 8, 8),
adds a second position embedding and runs four stride-2 ConvTranspose2d (5x5) up to 128 x 128 and two
convolutions to 4 channels (RGB + alpha); the alpha logits are soft-maxed over the slots and the slot
reconstructions combined (sum over K of recon * mask), MSE against the image. fp32 as released.
Phase 1: 4 Adam steps at batch 24 with the paper's learning-rate warmup and exponential decay set by
hand on the param group. Phase 2: inference_mode evaluation at batch 48 with 5 iterations (more at
test time, as the paper does), keeping the per-slot masks and attention maps. Seeded, fixed sizes.
2 phases + end."""

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(2791)
dev = "cuda"
RES, K, D, ITERS = 128, 7, 64, 3


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def build_grid(resolution):
    ranges = [torch.linspace(0.0, 1.0, steps=r) for r in resolution]
    grid = torch.meshgrid(*ranges, indexing="ij")
    grid = torch.stack(grid, dim=-1).reshape(resolution[0], resolution[1], -1).unsqueeze(0)
    return torch.cat([grid, 1.0 - grid], dim=-1)  # (1, H, W, 4)


class SoftPositionEmbed(nn.Module):
    def __init__(self, hidden, resolution):
        super().__init__()
        self.dense = nn.Linear(4, hidden)
        self.register_buffer("grid", build_grid(resolution))

    def forward(self, x):  # x: (B, H, W, C)
        return x + self.dense(self.grid)


class SlotAttention(nn.Module):
    def __init__(self, num_slots, dim, iters=3, eps=1e-8, hidden=128):
        super().__init__()
        self.num_slots, self.iters, self.eps, self.scale = num_slots, iters, eps, dim**-0.5
        self.slots_mu = nn.Parameter(torch.randn(1, 1, dim))
        self.slots_sigma = nn.Parameter(torch.rand(1, 1, dim))
        self.to_q = nn.Linear(dim, dim, bias=False)
        self.to_k = nn.Linear(dim, dim, bias=False)
        self.to_v = nn.Linear(dim, dim, bias=False)
        self.gru = nn.GRUCell(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, dim))
        self.norm_input = nn.LayerNorm(dim)
        self.norm_slots = nn.LayerNorm(dim)
        self.norm_pre_ff = nn.LayerNorm(dim)

    def forward(self, inputs, iters=None):
        b, _, d = inputs.shape
        mu = self.slots_mu.expand(b, self.num_slots, -1)
        sigma = self.slots_sigma.expand(b, self.num_slots, -1)
        slots = mu + sigma * torch.randn(mu.shape, device=inputs.device)
        inputs = self.norm_input(inputs)
        k, v = self.to_k(inputs), self.to_v(inputs)
        for _ in range(iters or self.iters):
            slots_prev = slots
            slots = self.norm_slots(slots)
            q = self.to_q(slots)
            dots = torch.einsum("bid,bjd->bij", q, k) * self.scale
            attn = dots.softmax(dim=1) + self.eps
            attn = attn / attn.sum(dim=-1, keepdim=True)
            updates = torch.einsum("bjd,bij->bid", v, attn)
            slots = self.gru(updates.reshape(-1, d), slots_prev.reshape(-1, d)).reshape(b, -1, d)
            slots = slots + self.mlp(self.norm_pre_ff(slots))
        return slots, attn


class SlotAttentionAutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(
            nn.Conv2d(3, D, 5, padding=2), nn.ReLU(inplace=True),
            nn.Conv2d(D, D, 5, padding=2), nn.ReLU(inplace=True),
            nn.Conv2d(D, D, 5, padding=2), nn.ReLU(inplace=True),
            nn.Conv2d(D, D, 5, padding=2), nn.ReLU(inplace=True),
        )  # fmt: skip
        self.enc_pos = SoftPositionEmbed(D, (RES, RES))
        self.layer_norm = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, D), nn.ReLU(inplace=True), nn.Linear(D, D))
        self.slot_attention = SlotAttention(K, D, ITERS)
        self.dec_init = (8, 8)
        self.dec_pos = SoftPositionEmbed(D, self.dec_init)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(D, D, 5, stride=2, padding=2, output_padding=1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(D, D, 5, stride=2, padding=2, output_padding=1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(D, D, 5, stride=2, padding=2, output_padding=1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(D, D, 5, stride=2, padding=2, output_padding=1), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(D, D, 5, stride=1, padding=2), nn.ReLU(inplace=True),
            nn.ConvTranspose2d(D, 4, 3, stride=1, padding=1),
        )  # fmt: skip

    def forward(self, image, iters=None):
        b = image.shape[0]
        x = self.enc(image).permute(0, 2, 3, 1)  # (B, H, W, C)
        x = self.enc_pos(x)
        x = self.mlp(self.layer_norm(x.flatten(1, 2)))
        slots, attn = self.slot_attention(x, iters)
        # spatial broadcast: every slot tiled over an 8 x 8 grid, batch becomes B * K
        s = slots.reshape(-1, 1, 1, D).repeat(1, self.dec_init[0], self.dec_init[1], 1)
        s = self.dec_pos(s).permute(0, 3, 1, 2)
        out = self.dec(s)  # (B*K, 4, 128, 128)
        out = out.reshape(b, -1, 4, RES, RES)
        recons, masks = out.split([3, 1], dim=2)
        masks = masks.softmax(dim=1)
        recon_combined = (recons * masks).sum(dim=1)
        return recon_combined, recons, masks, slots, attn


def synthetic_scenes(b, gen):
    # a few soft coloured blobs on a grey background, in [-1, 1] as the released pipeline normalises
    yy, xx = torch.meshgrid(
        torch.linspace(0, 1, RES, device=dev), torch.linspace(0, 1, RES, device=dev), indexing="ij"
    )
    img = torch.full((b, 3, RES, RES), -0.2, device=dev)
    for _ in range(4):
        c = torch.rand(b, 2, 1, 1, device=dev, generator=gen)
        col = torch.rand(b, 3, 1, 1, device=dev, generator=gen) * 2 - 1
        blob = torch.exp(-((xx - c[:, :1]) ** 2 + (yy - c[:, 1:]) ** 2) / 0.004)
        img = img * (1 - blob) + col * blob
    return img


model = SlotAttentionAutoEncoder().to(dev)
base_lr, warmup, decay_rate, decay_steps = 4e-4, 3, 0.5, 100_000
opt = torch.optim.Adam(model.parameters(), lr=base_lr)
gen = torch.Generator(device=dev)
gen.manual_seed(2791)
report("setup")

B = 24
model.train()
for step in range(4):
    lr = base_lr * min(1.0, (step + 1) / warmup) * decay_rate ** (step / decay_steps)
    opt.param_groups[0]["lr"] = lr
    image = synthetic_scenes(B, gen)
    recon_combined, recons, masks, slots, _ = model(image)
    loss = F.mse_loss(recon_combined, image)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print(f"step {step} lr {lr:.2e} loss {loss.item():.5f}")
    del recon_combined, recons, masks, slots, loss
report("train")

model.eval()
with torch.inference_mode():
    image = synthetic_scenes(48, gen)
    recon_combined, recons, masks, slots, attn = model(image, iters=5)
    mse = F.mse_loss(recon_combined, image)
    attn_maps = attn.reshape(48, K, RES, RES)
    print("eval mse", f"{mse.item():.5f}", tuple(masks.shape), tuple(attn_maps.shape), tuple(slots.shape))
report("eval")
print("done")
