"""Motion Transformer (MTR, Shi et al. 2022)-like multi-agent motion prediction, written by hand, with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported.

Inputs per scene: A=64 agents with 11 history steps of 29 features and M=1024 map polylines of 20 points of
9 features, fixed random validity masks (CPU-drawn). Encoders: PointNet-style polyline encoders (MLP,
max over points, MLP) to d=256; a scene context encoder of 6 nn.TransformerEncoderLayer (8 heads, batch
first, pre-norm) over the A + M tokens with a src_key_padding_mask. Decoder: for the first 8 agents of
each scene, 64 intention queries from fixed intention points (sine embedding + MLP); 6 decoder layers of
query self-attention (nn.MultiheadAttention), cross-attention to all agent tokens, and cross-attention to
a dynamic map collection (the 256 polylines nearest to each focal agent, by torch.topk on distances, then
gather), each layer with a GMM prediction head (mu x/y, log sigma x/y, rho over 80 future steps) and a
score head. Loss summed over layers: the positive mode is the intention point nearest to the ground-truth
endpoint (argmin), its bivariate Gaussian NLL over the future, cross-entropy on the scores, and an L1 on
the velocity of that mode.

Phases: 3 steps under bf16 autocast with AdamW, OneCycleLR and clip_grad_norm_ at batch 24 scenes (192
focal agents); an inference_mode evaluation at batch 48 (the last layer's 64 modes, top-6 by score and
gather); 2 steps in fp32 at batch 24 with every decoder layer under torch.utils.checkpoint
(non-reentrant); memory_stats() fragments printed at the end. 3 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import math  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

torch.manual_seed(2314)
device = "cuda"
A, TH, FA = 64, 11, 29
M, NP, FM = 1024, 20, 9
D, NQ, NF, TF, NMAP = 256, 64, 8, 80, 256


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def mlp(dims):
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers += [nn.LayerNorm(dims[i + 1]), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class PolylineEncoder(nn.Module):
    def __init__(self, cin):
        super().__init__()
        self.pre = mlp([cin, 128, 128])
        self.post = mlp([256, 256, D])

    def forward(self, x, mask):  # x [N, P, C], mask [N, P]
        f = self.pre(x)
        pooled = f.masked_fill(~mask.unsqueeze(-1), -1e4).max(dim=1, keepdim=True)[0]
        f = torch.cat([f, pooled.expand_as(f)], dim=-1)
        f = self.post(f).masked_fill(~mask.unsqueeze(-1), -1e4).max(dim=1)[0]
        return f


def sine_embed(xy, d=D):
    freqs = torch.exp(torch.arange(0, d // 4, device=xy.device, dtype=torch.float32) * (-math.log(10000.0) / (d // 4)))
    ang = xy.unsqueeze(-1) * freqs
    return torch.cat([ang.sin(), ang.cos()], dim=-1).flatten(-2)


class DecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(D, 8, batch_first=True)
        self.agent_attn = nn.MultiheadAttention(D, 8, batch_first=True)
        self.map_attn = nn.MultiheadAttention(D, 8, batch_first=True)
        self.n1, self.n2, self.n3, self.n4 = (nn.LayerNorm(D) for _ in range(4))
        self.ffn = mlp([D, 1024, D])
        self.gmm = mlp([D, D, TF * 7])
        self.score = mlp([D, D, 1])

    def forward(self, q, qpos, agent_tok, agent_pad, map_tok):
        h = self.n1(q + qpos)
        q = q + self.self_attn(h, h, q, need_weights=False)[0]
        h = self.n2(q)
        q = q + self.agent_attn(h, agent_tok, agent_tok, key_padding_mask=agent_pad, need_weights=False)[0]
        h = self.n3(q)
        q = q + self.map_attn(h, map_tok, map_tok, need_weights=False)[0]
        q = q + self.ffn(self.n4(q))
        return q, self.gmm(q).view(q.shape[0], NQ, TF, 7), self.score(q).squeeze(-1)


class MTR(nn.Module):
    def __init__(self):
        super().__init__()
        self.agent_enc = PolylineEncoder(FA)
        self.map_enc = PolylineEncoder(FM)
        layer = nn.TransformerEncoderLayer(D, 8, 1024, dropout=0.1, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
        self.pos = mlp([D, D, D])
        self.register_buffer("intention", torch.randn(NQ, 2) * 30.0)
        self.query_mlp = mlp([D, D, D])
        self.layers = nn.ModuleList([DecoderLayer() for _ in range(6)])

    def forward(self, agents, amask, apos, polys, pmask, mpos, ckpt=False):
        bsz = agents.shape[0]
        fa = self.agent_enc(agents.flatten(0, 1), amask.flatten(0, 1)).view(bsz, A, D)
        fm = self.map_enc(polys.flatten(0, 1), pmask.flatten(0, 1)).view(bsz, M, D)
        pad = torch.cat([~amask.any(-1), ~pmask.any(-1)], dim=1)
        tok = torch.cat([fa, fm], dim=1) + self.pos(sine_embed(torch.cat([apos, mpos], dim=1)))
        tok = self.encoder(tok, src_key_padding_mask=pad)
        agent_tok, map_tok = tok[:, :A], tok[:, A:]
        # focal agents: the first NF of each scene
        focal_pos = apos[:, :NF].reshape(-1, 2)
        agent_kv = agent_tok.repeat_interleave(NF, dim=0)
        agent_pad = pad[:, :A].repeat_interleave(NF, dim=0)
        dist = (focal_pos.view(bsz, NF, 1, 2) - mpos.view(bsz, 1, M, 2)).norm(dim=-1)
        near = dist.topk(NMAP, dim=-1, largest=False)[1].view(bsz * NF, NMAP)
        map_kv = map_tok.repeat_interleave(NF, dim=0).gather(1, near.unsqueeze(-1).expand(-1, -1, D))
        qpos = self.query_mlp(sine_embed(self.intention)).unsqueeze(0).expand(bsz * NF, -1, -1)
        q = torch.zeros_like(qpos)
        outs = []
        for layer in self.layers:
            if ckpt:
                q, gmm, score = checkpoint(layer, q, qpos, agent_kv, agent_pad, map_kv, use_reentrant=False)
            else:
                q, gmm, score = layer(q, qpos, agent_kv, agent_pad, map_kv)
            outs.append((gmm, score))
        return outs


def gmm_loss(outs, gt, intention):
    # positive mode: intention point nearest the ground-truth endpoint
    pos = (gt[:, -1].unsqueeze(1) - intention.unsqueeze(0)).norm(dim=-1).argmin(dim=1)
    total = 0.0
    for gmm, score in outs:
        g = gmm.float().gather(1, pos.view(-1, 1, 1, 1).expand(-1, 1, TF, 7)).squeeze(1)
        mu, log_s, rho = g[..., 0:2], g[..., 2:4].clamp(-1.6, 5.0), torch.tanh(g[..., 4]).clamp(-0.5, 0.5)
        s = log_s.exp()
        dx = (gt - mu) / s
        z = dx[..., 0] ** 2 + dx[..., 1] ** 2 - 2 * rho * dx[..., 0] * dx[..., 1]
        nll = log_s.sum(-1) + 0.5 * torch.log(1 - rho ** 2) + z / (2 * (1 - rho ** 2))
        vel = F.l1_loss(g[..., 5:7], torch.diff(gt, dim=1, prepend=gt[:, :1]))
        total = total + nll.mean() + F.cross_entropy(score.float(), pos) + 0.2 * vel
    return total


def make_batch(bsz):
    g = torch.Generator().manual_seed(bsz)
    agents = torch.randn(bsz, A, TH, FA, device=device)
    polys = torch.randn(bsz, M, NP, FM, device=device)
    amask = (torch.arange(TH)[None, None] >= torch.randint(0, 6, (bsz, A), generator=g)[..., None]).to(device)
    pmask = (torch.arange(NP)[None, None] < torch.randint(1, NP + 1, (bsz, M), generator=g)[..., None]).to(device)
    apos = torch.randn(bsz, A, 2, device=device) * 40
    mpos = torch.randn(bsz, M, 2, device=device) * 60
    gt = torch.randn(bsz * NF, TF, 2, device=device).cumsum(dim=1)
    return agents, amask, apos, polys, pmask, mpos, gt


model = MTR().to(device)
print("parameters", sum(p.numel() for p in model.parameters()))
report("model")

opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-4, total_steps=5, pct_start=0.3)
B = 24
for step in range(3):
    agents, amask, apos, polys, pmask, mpos, gt = make_batch(B)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outs = model(agents, amask, apos, polys, pmask, mpos)
        loss = gmm_loss(outs, gt, model.intention)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1000.0)
    opt.step()
    sched.step()
    print(f"bf16 step {step} loss {loss.item():.4f}")
del outs, loss, agents, amask, apos, polys, pmask, mpos, gt
report("train bf16")

model.eval()
with torch.inference_mode():
    agents, amask, apos, polys, pmask, mpos, gt = make_batch(48)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        gmm, score = model(agents, amask, apos, polys, pmask, mpos)[-1]
    top = score.float().softmax(-1).topk(6, dim=-1)
    trajs = gmm[..., :2].float().gather(1, top.indices.view(-1, 6, 1, 1).expand(-1, -1, TF, 2))
    fde = (trajs[:, :, -1] - gt[:, None, -1]).norm(dim=-1).min(dim=1)[0].mean()
    print("eval", tuple(trajs.shape), f"minFDE {fde.item():.3f}")
del agents, amask, apos, polys, pmask, mpos, gt, gmm, score, top, trajs, fde
report("eval inference_mode batch 48")

model.train()
for step in range(2):
    agents, amask, apos, polys, pmask, mpos, gt = make_batch(B)
    outs = model(agents, amask, apos, polys, pmask, mpos, ckpt=True)
    loss = gmm_loss(outs, gt, model.intention)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1000.0)
    opt.step()
    print(f"fp32 ckpt step {step} loss {loss.item():.4f}")
report("train fp32 checkpointed decoder")
stats = torch.cuda.memory_stats()
print("segments", stats["segment.all.current"], "inactive split bytes", stats["inactive_split_bytes.all.current"])
