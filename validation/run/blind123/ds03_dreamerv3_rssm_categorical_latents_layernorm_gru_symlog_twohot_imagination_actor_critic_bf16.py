"""A DreamerV3-style agent written from the paper: a conv encoder (4x4 stride-2 convs 32-256,
channel LayerNorm, SiLU) over 64x64 RGB uint8 frames sampled from a replay buffer kept on the GPU,
an RSSM with a LayerNorm GRU (deter 512) and 32x32 categorical latents (1% unimix, straight-through
one-hot samples) observed over sequences of 64 x batch 16, a transposed-conv decoder, symlog twohot
reward head of 255 bins, continue head, KL balancing with free bits (dyn 0.5, rep 0.1); imagination
of 15 steps from all 1,024 posterior states with a categorical actor (REINFORCE with entropy), a
twohot critic with a slow EMA copy, lambda returns, percentile return normalisation by
torch.quantile; bf16 autocast, fused Adam for the world model and foreach Adam for actor and
critic, grad clip 1000 and 100; 3 training steps, then a policy rollout of 64 environments for 32
steps under no_grad; 5 phases."""

import copy
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12303)
B, L = (2, 8) if SMALL else (16, 64)
DETER, HIDDEN = (64, 64) if SMALL else (512, 512)
STOCH, CLASSES = (8, 8) if SMALL else (32, 32)
N_ACT = 6
HORIZON = 4 if SMALL else 15
BUF = 64 if SMALL else 6000
BINS = 255
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = dict(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda")


def symlog(x):
    return torch.sign(x) * torch.log1p(x.abs())


def symexp(x):
    return torch.sign(x) * torch.expm1(x.abs())


BUCKETS = torch.linspace(-20, 20, BINS, device=device)


def twohot(x):
    x = symlog(x).clamp(-20, 20)
    below = (BUCKETS <= x[..., None]).sum(-1) - 1
    above = (below + 1).clamp(max=BINS - 1)
    below = below.clamp(min=0)
    lo, hi = BUCKETS[below], BUCKETS[above]
    dist = (hi - lo).clamp(min=1e-8)
    w_hi = ((x - lo) / dist).clamp(0, 1)
    return F.one_hot(below, BINS) * (1 - w_hi)[..., None] + F.one_hot(above, BINS) * w_hi[..., None]


def twohot_mean(logits):
    return symexp((F.softmax(logits.float(), -1) * BUCKETS).sum(-1))


class ChanLN(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def mlp(i, o, layers=2, width=HIDDEN):
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(i, width, bias=False), nn.LayerNorm(width), nn.SiLU()]
        i = width
    return nn.Sequential(*mods, nn.Linear(i, o))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        mods, c = [], 3
        for d in (32, 64, 128, 256):
            mods += [nn.Conv2d(c, d, 4, 2, 1, bias=False), ChanLN(d), nn.SiLU()]
            c = d
        self.net = nn.Sequential(*mods)

    def forward(self, img):
        return self.net(img.float() / 255.0 - 0.5).flatten(1)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(DETER + STOCH * CLASSES, 256 * 4 * 4)
        mods, c = [], 256
        for d in (128, 64, 32):
            mods += [nn.ConvTranspose2d(c, d, 4, 2, 1, bias=False), ChanLN(d), nn.SiLU()]
            c = d
        mods += [nn.ConvTranspose2d(c, 3, 4, 2, 1)]
        self.net = nn.Sequential(*mods)

    def forward(self, feat):
        return self.net(self.fc(feat).view(-1, 256, 4, 4))


class GRU(nn.Module):
    def __init__(self, inp, size):
        super().__init__()
        self.linear = nn.Linear(inp + size, 3 * size, bias=False)
        self.norm = nn.LayerNorm(3 * size)

    def forward(self, x, h):
        parts = self.norm(self.linear(torch.cat([x, h], -1)))
        reset, cand, update = parts.chunk(3, -1)
        reset = torch.sigmoid(reset)
        cand = torch.tanh(reset * cand)
        update = torch.sigmoid(update - 1)
        return update * cand + (1 - update) * h


class RSSM(nn.Module):
    def __init__(self, embed):
        super().__init__()
        self.img_in = nn.Sequential(nn.Linear(STOCH * CLASSES + N_ACT, HIDDEN, bias=False), nn.LayerNorm(HIDDEN), nn.SiLU())
        self.gru = GRU(HIDDEN, DETER)
        self.prior = mlp(DETER, STOCH * CLASSES, 1)
        self.post = mlp(DETER + embed, STOCH * CLASSES, 1)

    def initial(self, n):
        return torch.zeros(n, DETER, device=device), torch.zeros(n, STOCH * CLASSES, device=device)

    def sample(self, logits):
        probs = F.softmax(logits.float().view(-1, STOCH, CLASSES), -1)
        probs = 0.99 * probs + 0.01 / CLASSES
        idx = torch.multinomial(probs.view(-1, CLASSES), 1).view(-1, STOCH)
        onehot = F.one_hot(idx, CLASSES).float()
        return (onehot + probs - probs.detach()).flatten(1), probs

    def img_step(self, deter, stoch, action):
        x = self.img_in(torch.cat([stoch, action], -1))
        deter = self.gru(x, deter)
        stoch, probs = self.sample(self.prior(deter))
        return deter, stoch, probs

    def observe(self, embed, actions, first):
        deter, stoch = self.initial(embed.shape[0])
        deters, stochs, posts, priors = [], [], [], []
        for t in range(embed.shape[1]):
            keep = (~first[:, t]).float()[:, None]
            deter, stoch = deter * keep, stoch * keep
            deter, _, prior = self.img_step(deter, stoch, actions[:, t])
            stoch, post = self.sample(self.post(torch.cat([deter, embed[:, t]], -1)))
            deters.append(deter)
            stochs.append(stoch)
            posts.append(post)
            priors.append(prior)
        return torch.stack(deters, 1), torch.stack(stochs, 1), torch.stack(posts, 1), torch.stack(priors, 1)


def kl(p, q):
    return (p * (p.clamp(min=1e-8).log() - q.clamp(min=1e-8).log())).sum(-1).sum(-1)


encoder = Encoder().to(device)
rssm = RSSM(256 * 4 * 4).to(device)
decoder = Decoder().to(device)
feat_dim = DETER + STOCH * CLASSES
reward_head = mlp(feat_dim, BINS).to(device)
cont_head = mlp(feat_dim, 1).to(device)
nn.init.zeros_(reward_head[-1].weight)
actor = mlp(feat_dim, N_ACT, 3).to(device)
critic = mlp(feat_dim, BINS, 3).to(device)
nn.init.zeros_(critic[-1].weight)
slow_critic = copy.deepcopy(critic).requires_grad_(False)
wm_params = [p for m in (encoder, rssm, decoder, reward_head, cont_head) for p in m.parameters()]
wm_opt = torch.optim.Adam(wm_params, lr=1e-4, eps=1e-8, fused=device == "cuda")
actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-5, eps=1e-5, foreach=device == "cuda")
critic_opt = torch.optim.Adam(critic.parameters(), lr=3e-5, eps=1e-5, foreach=device == "cuda")

buf_img = torch.randint(0, 256, (BUF, 3, 64, 64), dtype=torch.uint8, device=device)
buf_act = torch.randint(0, N_ACT, (BUF,), device=device)
buf_rew = torch.randn(BUF, device=device)
buf_first = torch.rand(BUF, device=device) < 0.01
ret_lo = torch.zeros((), device=device)
ret_hi = torch.zeros((), device=device)
if device == "cuda":
    print(f"buffer {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    start = torch.randint(0, BUF - L, (B,), device=device)
    idx = start[:, None] + torch.arange(L, device=device)
    img, act = buf_img[idx], F.one_hot(buf_act[idx], N_ACT).float()
    rew, first = buf_rew[idx], buf_first[idx]
    first[:, 0] = True
    with torch.autocast(**amp):
        embed = encoder(img.flatten(0, 1)).view(B, L, -1)
        deter, stoch, post, prior = rssm.observe(embed, act, first)
        feat = torch.cat([deter, stoch], -1)
        recon = decoder(feat.flatten(0, 1))
        target = img.flatten(0, 1).float() / 255.0 - 0.5
        rec_loss = (recon.float() - target).pow(2).sum((1, 2, 3)).mean()
        rew_logits = reward_head(feat)
        rew_loss = -(twohot(rew) * F.log_softmax(rew_logits.float(), -1)).sum(-1).mean()
        cont_loss = F.binary_cross_entropy_with_logits(cont_head(feat).squeeze(-1).float(), (~first).float())
    dyn = kl(post.detach(), prior).clamp(min=1.0).mean()
    rep = kl(post, prior.detach()).clamp(min=1.0).mean()
    wm_loss = rec_loss + rew_loss + cont_loss + 0.5 * dyn + 0.1 * rep
    wm_opt.zero_grad(set_to_none=True)
    wm_loss.backward()
    nn.utils.clip_grad_norm_(wm_params, 1000.0)
    wm_opt.step()

    d, s = deter.detach().flatten(0, 1), stoch.detach().flatten(0, 1)
    feats, logps, ents = [torch.cat([d, s], -1)], [], []
    rssm.requires_grad_(False)
    with torch.autocast(**amp):
        for _ in range(HORIZON):
            logits = actor(feats[-1].detach()).float()
            dist = torch.distributions.Categorical(logits=logits)
            a = dist.sample()
            logps.append(dist.log_prob(a))
            ents.append(dist.entropy())
            d, s, _ = rssm.img_step(d, s, F.one_hot(a, N_ACT).float())
            feats.append(torch.cat([d, s], -1))
        traj = torch.stack(feats)
        r = twohot_mean(reward_head(traj[1:]))
        c = torch.sigmoid(cont_head(traj[1:]).float().squeeze(-1)) * 0.997
        v = twohot_mean(slow_critic(traj))
    rssm.requires_grad_(True)
    rets = [v[-1]]
    for t in reversed(range(HORIZON)):
        rets.append(r[t] + c[t] * (0.05 * v[t + 1] + 0.95 * rets[-1]))
    ret = torch.stack(rets[1:][::-1])
    lo, hi = torch.quantile(ret.detach().flatten(), torch.tensor([0.05, 0.95], device=device))
    ret_lo = 0.99 * ret_lo + 0.01 * lo
    ret_hi = 0.99 * ret_hi + 0.01 * hi
    scale = (ret_hi - ret_lo).clamp(min=1.0)
    adv = ((ret - v[:-1]) / scale).detach()
    actor_loss = -(torch.stack(logps) * adv).mean() - 3e-4 * torch.stack(ents).mean()
    actor_opt.zero_grad(set_to_none=True)
    actor_loss.backward()
    nn.utils.clip_grad_norm_(actor.parameters(), 100.0)
    actor_opt.step()
    with torch.autocast(**amp):
        crit_logits = critic(traj[:-1].detach())
    critic_loss = -(twohot(ret.detach()) * F.log_softmax(crit_logits.float(), -1)).sum(-1).mean()
    critic_opt.zero_grad(set_to_none=True)
    critic_loss.backward()
    nn.utils.clip_grad_norm_(critic.parameters(), 100.0)
    critic_opt.step()
    with torch.no_grad():
        for p, sp in zip(critic.parameters(), slow_critic.parameters()):
            sp.lerp_(p, 0.02)
    if device == "cuda":
        print(
            f"train {step} wm {wm_loss.item():.2f} actor {actor_loss.item():.3f} critic {critic_loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del embed, deter, stoch, post, prior, feat, recon, traj, feats, logps, ents, wm_loss, actor_loss, critic_loss

N_ENV = 8 if SMALL else 64
with torch.no_grad(), torch.autocast(**amp):
    d, s = rssm.initial(N_ENV)
    a = torch.zeros(N_ENV, N_ACT, device=device)
    total = torch.zeros(N_ENV, device=device)
    for t in range(32 if not SMALL else 4):
        frame = torch.randint(0, 256, (N_ENV, 3, 64, 64), dtype=torch.uint8, device=device)
        e = encoder(frame)
        d, _, _ = rssm.img_step(d, s, a)
        s, _ = rssm.sample(rssm.post(torch.cat([d, e], -1)))
        a = F.one_hot(actor(torch.cat([d, s], -1)).argmax(-1), N_ACT).float()
        total += twohot_mean(reward_head(torch.cat([d, s], -1)))
if device == "cuda":
    print(
        f"policy {total.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
