"""ACT, the Action Chunking Transformer of ALOHA (tonyzhaozh/act: detr/models/detr_vae.py,
detr/models/transformer.py, detr/models/backbone.py, imitate_episodes.py), written by hand: a CVAE
whose encoder (4 post-norm DETR encoder layers, d 512, 8 heads, FFN 3,200) reads [CLS, joint
positions, 100 actions] with a sinusoid table and a key-padding mask (`torch.full((bs, 2), False)`
built on the CPU and moved) and emits mu and logvar of a 32-d latent (`reparametrize`); a
torchvision ResNet-18 trunk (weights None, BatchNorm replaced by DETR's FrozenBatchNorm2d buffers)
shared by the 4 cameras of 480 x 640 (ImageNet-normalized by hand), DETR's PositionEmbeddingSine
(normalized cumsums of a ones mask), a 1 x 1 input projection, the 4 cameras' 15 x 20 feature maps
concatenated along the width, the latent and the proprioception as two extra tokens with learned
positions, a 4-layer encoder and a 7-layer decoder (`nn.MultiheadAttention`, positions added to
queries and keys, DETR style) over 100 `query_embed` queries, an action head of 14 and an is_pad
head. Loss: L1 over unpadded actions (`~is_pad`) plus 10 x KL. fp32, AdamW at 1e-5 with the
backbone as its own parameter group, weight decay 1e-4. Phase 1: 5 steps at batch 8 (the last 30
of each 100-step chunk padded). Phase 2: an evaluation rollout of 50 timesteps under inference_mode
with temporal ensembling as imitate_episodes.py does it: the policy queried every step at batch 1,
`all_time_actions[[t], t:t + 100] = all_actions` into a (50, 150, 14) buffer, the populated rows
selected with a boolean mask (`torch.all(actions_for_curr_step != 0, axis=1)`, a value-dependent
row count, min(t + 1, 50) here), exponential weights from numpy moved to the GPU, the weighted sum
copied to the host each step. 2 phases."""

import math

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

torch.manual_seed(2685)
np.random.seed(2685)
dev = "cuda"


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class FrozenBatchNorm2d(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("weight", torch.ones(n))
        self.register_buffer("bias", torch.zeros(n))
        self.register_buffer("running_mean", torch.zeros(n))
        self.register_buffer("running_var", torch.ones(n))

    def forward(self, x):
        w = self.weight.reshape(1, -1, 1, 1)
        b = self.bias.reshape(1, -1, 1, 1)
        rv = self.running_var.reshape(1, -1, 1, 1)
        rm = self.running_mean.reshape(1, -1, 1, 1)
        scale = w * (rv + 1e-5).rsqrt()
        bias = b - rm * scale
        return x * scale + bias


class PositionEmbeddingSine(nn.Module):
    def __init__(self, num_pos_feats=256, temperature=10000):
        super().__init__()
        self.num_pos_feats, self.temperature, self.scale = num_pos_feats, temperature, 2 * math.pi

    def forward(self, x):
        not_mask = torch.ones_like(x[0, [0]])
        y_embed = not_mask.cumsum(1, dtype=torch.float32)
        x_embed = not_mask.cumsum(2, dtype=torch.float32)
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * self.scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * self.scale
        dim_t = torch.arange(self.num_pos_feats, dtype=torch.float32, device=x.device)
        dim_t = self.temperature ** (2 * (dim_t // 2) / self.num_pos_feats)
        pos_x = x_embed[:, :, :, None] / dim_t
        pos_y = y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        r = torchvision.models.resnet18(weights=None, norm_layer=FrozenBatchNorm2d)
        self.body = nn.Sequential(*list(r.children())[:-2])
        self.num_channels = 512
        self.pos = PositionEmbeddingSine(256)

    def forward(self, x):
        f = self.body(x)
        return f, self.pos(f).to(f.dtype)


class EncoderLayer(nn.Module):
    def __init__(self, d=512, heads=8, ff=3200, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout, self.dropout1, self.dropout2 = (
            nn.Dropout(dropout),
            nn.Dropout(dropout),
            nn.Dropout(dropout),
        )

    def forward(self, src, pos, key_padding_mask=None):
        q = k = src + pos
        src2 = self.self_attn(q, k, value=src, key_padding_mask=key_padding_mask)[0]
        src = self.norm1(src + self.dropout1(src2))
        src2 = self.linear2(self.dropout(F.relu(self.linear1(src))))
        return self.norm2(src + self.dropout2(src2))


class DecoderLayer(nn.Module):
    def __init__(self, d=512, heads=8, ff=3200, dropout=0.1):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.multihead_attn = nn.MultiheadAttention(d, heads, dropout=dropout)
        self.linear1, self.linear2 = nn.Linear(d, ff), nn.Linear(ff, d)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.dropout = nn.Dropout(dropout)
        self.dropout1, self.dropout2, self.dropout3 = (
            nn.Dropout(dropout),
            nn.Dropout(dropout),
            nn.Dropout(dropout),
        )

    def forward(self, tgt, memory, pos, query_pos):
        q = k = tgt + query_pos
        tgt2 = self.self_attn(q, k, value=tgt)[0]
        tgt = self.norm1(tgt + self.dropout1(tgt2))
        tgt2 = self.multihead_attn(query=tgt + query_pos, key=memory + pos, value=memory)[0]
        tgt = self.norm2(tgt + self.dropout2(tgt2))
        tgt2 = self.linear2(self.dropout(F.relu(self.linear1(tgt))))
        return self.norm3(tgt + self.dropout3(tgt2))


def sinusoid_table(n_position, d_hid):
    pos = np.arange(n_position)[:, None]
    table = pos / np.power(10000, 2 * (np.arange(d_hid)[None] // 2) / d_hid)
    table[:, 0::2] = np.sin(table[:, 0::2])
    table[:, 1::2] = np.cos(table[:, 1::2])
    return torch.FloatTensor(table).unsqueeze(0)


def reparametrize(mu, logvar):
    std = logvar.div(2).exp()
    eps = torch.randn_like(std)
    return mu + std * eps


STATE, CHUNK, CAMS, HID, LATENT = 14, 100, 4, 512, 32


class DETRVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()
        self.encoder = nn.ModuleList(EncoderLayer() for _ in range(4))  # CVAE encoder
        self.t_encoder = nn.ModuleList(EncoderLayer() for _ in range(4))
        self.t_decoder = nn.ModuleList(DecoderLayer() for _ in range(7))
        self.dec_norm = nn.LayerNorm(HID)
        self.action_head = nn.Linear(HID, STATE)
        self.is_pad_head = nn.Linear(HID, 1)
        self.query_embed = nn.Embedding(CHUNK, HID)
        self.input_proj = nn.Conv2d(512, HID, kernel_size=1)
        self.input_proj_robot_state = nn.Linear(STATE, HID)
        self.cls_embed = nn.Embedding(1, HID)
        self.encoder_action_proj = nn.Linear(STATE, HID)
        self.encoder_joint_proj = nn.Linear(STATE, HID)
        self.latent_proj = nn.Linear(HID, LATENT * 2)
        self.register_buffer("pos_table", sinusoid_table(1 + 1 + CHUNK, HID))
        self.latent_out_proj = nn.Linear(LATENT, HID)
        self.additional_pos_embed = nn.Embedding(2, HID)
        self.register_buffer("img_mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 1, 3, 1, 1))
        self.register_buffer("img_std", torch.tensor([0.229, 0.224, 0.225]).view(1, 1, 3, 1, 1))

    def forward(self, qpos, image, actions=None, is_pad=None):
        bs = qpos.shape[0]
        image = (image - self.img_mean) / self.img_std
        if actions is not None:
            action_embed = self.encoder_action_proj(actions)
            qpos_embed = self.encoder_joint_proj(qpos).unsqueeze(1)
            cls_embed = self.cls_embed.weight.unsqueeze(0).repeat(bs, 1, 1)
            x = torch.cat([cls_embed, qpos_embed, action_embed], axis=1).permute(1, 0, 2)
            cls_joint_is_pad = torch.full((bs, 2), False).to(qpos.device)
            pad = torch.cat([cls_joint_is_pad, is_pad], axis=1)
            pos = self.pos_table.clone().detach().permute(1, 0, 2)
            for layer in self.encoder:
                x = layer(x, pos, key_padding_mask=pad)
            latent_info = self.latent_proj(x[0])
            mu, logvar = latent_info[:, :LATENT], latent_info[:, LATENT:]
            latent_input = self.latent_out_proj(reparametrize(mu, logvar))
        else:
            mu = logvar = None
            latent_input = self.latent_out_proj(
                torch.zeros([bs, LATENT], dtype=torch.float32).to(qpos.device)
            )
        feats, poss = [], []
        for cam in range(CAMS):
            f, p = self.backbone(image[:, cam])
            feats.append(self.input_proj(f))
            poss.append(p)
        src = torch.cat(feats, axis=3).flatten(2).permute(2, 0, 1)
        pos = torch.cat(poss, axis=3).flatten(2).permute(2, 0, 1).repeat(1, bs, 1)
        query_embed = self.query_embed.weight.unsqueeze(1).repeat(1, bs, 1)
        add_pos = self.additional_pos_embed.weight.unsqueeze(1).repeat(1, bs, 1)
        pos = torch.cat([add_pos, pos], axis=0)
        src = torch.cat([torch.stack([latent_input, self.input_proj_robot_state(qpos)], axis=0), src], axis=0)
        memory = src
        for layer in self.t_encoder:
            memory = layer(memory, pos)
        hs = torch.zeros_like(query_embed)
        for layer in self.t_decoder:
            hs = layer(hs, memory, pos, query_embed)
        hs = self.dec_norm(hs).transpose(0, 1)
        return self.action_head(hs), self.is_pad_head(hs), (mu, logvar)


policy = DETRVAE().to(dev)
param_dicts = [
    {"params": [p for n, p in policy.named_parameters() if "backbone" not in n and p.requires_grad]},
    {"params": [p for n, p in policy.named_parameters() if "backbone" in n and p.requires_grad], "lr": 1e-5},
]
opt = torch.optim.AdamW(param_dicts, lr=1e-5, weight_decay=1e-4)
report("setup")

B = 8
policy.train()
for step in range(5):
    image = torch.rand(B, CAMS, 3, 480, 640, device=dev)
    qpos = torch.randn(B, STATE, device=dev)
    actions = torch.randn(B, CHUNK, STATE, device=dev)
    is_pad = torch.zeros(B, CHUNK, dtype=torch.bool, device=dev)
    is_pad[:, 70:] = True
    a_hat, is_pad_hat, (mu, logvar) = policy(qpos, image, actions, is_pad)
    klds = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp())
    total_kld = klds.sum(1).mean(0, True)
    all_l1 = F.l1_loss(actions, a_hat, reduction="none")
    l1 = (all_l1 * ~is_pad.unsqueeze(-1)).mean()
    loss = l1 + 10 * total_kld[0]
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} l1 {l1.item():.4f} kl {total_kld.item():.4f}")
report("train")

policy.eval()
MAX_T = 50
with torch.inference_mode():
    all_time_actions = torch.zeros([MAX_T, MAX_T + CHUNK, STATE]).cuda()
    qpos_np = np.zeros(STATE, dtype=np.float32)
    for t in range(MAX_T):
        qpos = torch.from_numpy(qpos_np).float().cuda().unsqueeze(0)
        curr_image = torch.rand(1, CAMS, 3, 480, 640, device=dev)
        all_actions, _, _ = policy(qpos, curr_image)
        all_time_actions[[t], t : t + CHUNK] = all_actions
        actions_for_curr_step = all_time_actions[:, t]
        actions_populated = torch.all(actions_for_curr_step != 0, axis=1)
        actions_for_curr_step = actions_for_curr_step[actions_populated]
        k = 0.01
        exp_weights = np.exp(-k * np.arange(len(actions_for_curr_step)))
        exp_weights = exp_weights / exp_weights.sum()
        exp_weights = torch.from_numpy(exp_weights).cuda().unsqueeze(dim=1)
        raw_action = (actions_for_curr_step * exp_weights).sum(dim=0, keepdim=True)
        qpos_np = raw_action.squeeze(0).cpu().numpy().astype(np.float32) * 0.1
    print("rollout", MAX_T, float(np.abs(qpos_np).sum()))
report("rollout")
print("done")
