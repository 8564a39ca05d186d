"""IRIS-like world model (Micheli et al. 2023) trained on random 64x64 Atari-like frames.

Tokenizer: a taming-style VQ-VAE (conv encoder of ResNet blocks with GroupNorm and SiLU, 4 downsamplings
64 -> 4x4, self-attention blocks at 16, 8 and 4 by hand with bmm, z 512, codebook of 512 x 512 by
nearest neighbour through ||z||^2 + ||e||^2 - 2 z.e and argmin, straight-through z + (z_q - z).detach(),
commitment beta 0.25) and the mirrored decoder with nearest upsampling; L1 reconstruction.

World model: a GPT of 10 layers (d 256, 4 heads, SDPA is_causal) over 20 frames x (16 observation tokens
+ 1 action token) = 340 tokens, with heads for the next observation token, the reward (3 classes) and the
episode end (2 classes) on the action/last-observation positions.

Phases: the tokenizer's first step (fp32, Adam, batch 128 frames); 2 more steps; the world model trained
on sequences tokenized under no_grad (batch 32 x 20 frames, bf16 autocast, fused AdamW with decay groups,
clip 10); imagination under inference_mode: 64 trajectories of 20 steps from one real frame, a
preallocated KV cache of 340 positions filled token by token with multinomial sampling, then all 1,280
imagined frames decoded; then (after del and empty_cache) an actor-critic (conv encoder + LSTMCell 512,
IRIS's shapes) trained on the imagined frames with lambda-returns and REINFORCE, fp32 Adam. 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2086)
if SMALL:
    CH, Z, VOCAB, D, HEADS, LAYERS, FRAMES, TOK_BATCH, WM_BATCH, IMAG = 16, 32, 64, 64, 4, 2, 4, 4, 2, 4
else:
    CH, Z, VOCAB, D, HEADS, LAYERS, FRAMES, TOK_BATCH, WM_BATCH, IMAG = (
        64,
        512,
        512,
        256,
        4,
        10,
        20,
        128,
        32,
        64,
    )
RES, TOKENS, ACTIONS = 64, 16, 18
BLOCK = TOKENS + 1
SEQ = FRAMES * BLOCK
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def Normalize(c):
    return nn.GroupNorm(32 if c >= 32 else 8, c, eps=1e-6)


class ResnetBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1, self.conv1 = Normalize(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2, self.conv2 = Normalize(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.norm = Normalize(c)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x):
        h = self.norm(x)
        q, k, v = self.q(h), self.k(h), self.v(h)
        b, c, hh, ww = q.shape
        q = q.reshape(b, c, hh * ww).permute(0, 2, 1)
        w_ = torch.bmm(q, k.reshape(b, c, hh * ww)) * (c**-0.5)
        w_ = F.softmax(w_, dim=2)
        h = torch.bmm(v.reshape(b, c, hh * ww), w_.permute(0, 2, 1)).reshape(b, c, hh, ww)
        return x + self.proj_out(h)


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(3, CH, 3, padding=1)]
        res = RES
        for _ in range(4):
            layers.append(ResnetBlock(CH, CH))
            if res in (8, 16):
                layers.append(AttnBlock(CH))
            layers.append(nn.Conv2d(CH, CH, 3, stride=2, padding=1))
            res //= 2
        layers += [
            ResnetBlock(CH, CH),
            AttnBlock(CH),
            ResnetBlock(CH, CH),
            Normalize(CH),
            nn.SiLU(),
            nn.Conv2d(CH, Z, 3, padding=1),
        ]
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        layers = [nn.Conv2d(Z, CH, 3, padding=1), ResnetBlock(CH, CH), AttnBlock(CH), ResnetBlock(CH, CH)]
        res = RES // 16
        for _ in range(4):
            layers.append(ResnetBlock(CH, CH))
            if res in (8, 16):
                layers.append(AttnBlock(CH))
            layers += [nn.Upsample(scale_factor=2.0, mode="nearest"), nn.Conv2d(CH, CH, 3, padding=1)]
            res *= 2
        layers += [Normalize(CH), nn.SiLU(), nn.Conv2d(CH, 3, 3, padding=1)]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z)


class Tokenizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.pre_quant_conv = nn.Conv2d(Z, Z, 1)
        self.embedding = nn.Embedding(VOCAB, Z)
        self.embedding.weight.data.uniform_(-1.0 / VOCAB, 1.0 / VOCAB)
        self.post_quant_conv = nn.Conv2d(Z, Z, 1)
        self.decoder = Decoder()

    def encode(self, x):
        z = self.pre_quant_conv(self.encoder(x))
        b, e, h, w = z.shape
        z_flat = z.permute(0, 2, 3, 1).reshape(-1, e)
        dist = (
            torch.sum(z_flat**2, dim=1, keepdim=True)
            + torch.sum(self.embedding.weight**2, dim=1)
            - 2 * torch.einsum("bd,dn->bn", z_flat, self.embedding.weight.t())
        )
        tokens = dist.argmin(dim=-1)
        z_q = self.embedding(tokens).view(b, h, w, e).permute(0, 3, 1, 2).contiguous()
        return z, z_q, tokens.view(b, h * w)

    def decode(self, z_q):
        return self.decoder(self.post_quant_conv(z_q))

    def decode_tokens(self, tokens):
        b = tokens.shape[0]
        z_q = self.embedding(tokens).view(b, 4, 4, Z).permute(0, 3, 1, 2).contiguous()
        return self.decode(z_q)

    def loss(self, x):
        z, z_q, _ = self.encode(x)
        commitment = (z.detach() - z_q).pow(2).mean() + 0.25 * (z - z_q.detach()).pow(2).mean()
        z_q = z + (z_q - z).detach()
        rec = self.decode(z_q)
        return commitment + torch.abs(x - rec).mean()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D), nn.Dropout(0.1))

    def attn(self, x, cache=None, pos=0):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        if cache is None:
            y = F.scaled_dot_product_attention(
                q, k, v, is_causal=True, dropout_p=0.1 if self.training else 0.0
            )
        else:
            cache[0][:, :, pos : pos + t] = k
            cache[1][:, :, pos : pos + t] = v
            y = F.scaled_dot_product_attention(
                q, cache[0][:, :, : pos + t], cache[1][:, :, : pos + t], is_causal=t > 1
            )
        return self.proj(y.transpose(1, 2).reshape(b, t, D))

    def forward(self, x, cache=None, pos=0):
        x = x + self.attn(self.ln1(x), cache, pos)
        return x + self.mlp(self.ln2(x))


class WorldModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.obs_emb = nn.Embedding(VOCAB, D)
        self.act_emb = nn.Embedding(ACTIONS, D)
        self.pos_emb = nn.Embedding(SEQ, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head_obs = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, VOCAB))
        self.head_rew = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, 3))
        self.head_end = nn.Sequential(nn.Linear(D, D), nn.ReLU(), nn.Linear(D, 2))

    def embed(self, obs_tokens, actions):
        b = obs_tokens.shape[0]
        x = torch.cat([self.obs_emb(obs_tokens), self.act_emb(actions).unsqueeze(2)], dim=2)
        return x.view(b, -1, D)

    def forward(self, x, caches=None, pos=0):
        x = x + self.pos_emb(torch.arange(pos, pos + x.shape[1], device=x.device))
        for i, blk in enumerate(self.blocks):
            x = blk(x, None if caches is None else caches[i], pos)
        return self.ln_f(x)


def frames(n):
    return torch.rand(n, 3, RES, RES, device=device)


tokenizer = Tokenizer().to(device)
print(f"tokenizer {sum(p.numel() for p in tokenizer.parameters()) / 1e6:.1f}M")
tok_opt = torch.optim.Adam(tokenizer.parameters(), lr=1e-4)
for step in range(3):
    loss = tokenizer.loss(frames(TOK_BATCH))
    tok_opt.zero_grad(set_to_none=True)
    loss.backward()
    tok_opt.step()
    print(f"tokenizer step {step} loss {loss.item():.4f}")
    if step == 0:
        report("tokenizer first step")
report("tokenizer")

wm = WorldModel().to(device)
decay = [p for n, p in wm.named_parameters() if p.dim() >= 2 and "emb" not in n]
no_decay = [p for n, p in wm.named_parameters() if p.dim() < 2 or "emb" in n]
wm_opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, fused=amp
)
print(f"world model {sum(p.numel() for p in wm.parameters()) / 1e6:.1f}M")
tokenizer.eval()
for step in range(3):
    obs = frames(WM_BATCH * FRAMES)
    with torch.no_grad():
        _, _, tokens = tokenizer.encode(obs)
    tokens = tokens.view(WM_BATCH, FRAMES, TOKENS)
    actions = torch.randint(0, ACTIONS, (WM_BATCH, FRAMES), device=device)
    rewards = torch.randint(0, 3, (WM_BATCH, FRAMES), device=device)
    ends = torch.zeros(WM_BATCH, FRAMES, dtype=torch.long, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        h = wm(wm.embed(tokens, actions))
        logits_obs = wm.head_obs(h[:, :-1])
        act_pos = h.view(WM_BATCH, FRAMES, BLOCK, D)[:, :, -1]
        logits_rew = wm.head_rew(act_pos)
        logits_end = wm.head_end(act_pos)
    # target of position i is token i + 1 when that token is an observation token
    targets = torch.cat([tokens, torch.full_like(actions, -100).unsqueeze(2)], dim=2).view(WM_BATCH, -1)[
        :, 1:
    ]
    loss = (
        F.cross_entropy(logits_obs.float().reshape(-1, VOCAB), targets.reshape(-1), ignore_index=-100)
        + F.cross_entropy(logits_rew.float().reshape(-1, 3), rewards.reshape(-1))
        + F.cross_entropy(logits_end.float().reshape(-1, 2), ends.reshape(-1))
    )
    wm_opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(wm.parameters(), 10.0)
    wm_opt.step()
    print(f"world model step {step} loss {loss.item():.4f}")
report("world model bf16")

# imagination with a KV cache: 64 trajectories of FRAMES steps from one real frame each
wm.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    dtype = torch.bfloat16 if amp else torch.float32
    caches = [
        (
            torch.empty(IMAG, HEADS, SEQ, D // HEADS, device=device, dtype=dtype),
            torch.empty(IMAG, HEADS, SEQ, D // HEADS, device=device, dtype=dtype),
        )
        for _ in range(LAYERS)
    ]
    _, _, obs_tokens = tokenizer.encode(frames(IMAG))
    all_tokens = torch.empty(IMAG, FRAMES, TOKENS, dtype=torch.long, device=device)
    all_actions = torch.randint(0, ACTIONS, (IMAG, FRAMES), device=device)
    all_rewards = torch.empty(IMAG, FRAMES, device=device)
    all_tokens[:, 0] = obs_tokens
    pos = 0
    h = wm(wm.obs_emb(obs_tokens), caches, pos)
    pos += TOKENS
    for t in range(FRAMES - 1):
        h = wm(wm.act_emb(all_actions[:, t : t + 1]), caches, pos)
        pos += 1
        all_rewards[:, t] = torch.argmax(wm.head_rew(h[:, -1]), dim=-1).float() - 1
        for i in range(TOKENS):
            tok = torch.multinomial(F.softmax(wm.head_obs(h[:, -1]).float(), dim=-1), 1)
            all_tokens[:, t + 1, i] = tok.squeeze(1)
            h = wm(wm.obs_emb(tok), caches, pos)
            pos += 1
    h = wm(wm.act_emb(all_actions[:, -1:]), caches, pos)
    all_rewards[:, -1] = torch.argmax(wm.head_rew(h[:, -1]), dim=-1).float() - 1
with torch.inference_mode():
    imagined = torch.cat(
        [tokenizer.decode_tokens(chunk).clamp(0, 1) for chunk in all_tokens.view(-1, TOKENS).split(256)]
    )
imagined = imagined.view(IMAG, FRAMES, 3, RES, RES)
print(f"imagined frames {tuple(imagined.shape)} reward sum {all_rewards.sum().item():.1f}")
report("kv cache imagination")

del caches, wm_opt, tok_opt
torch.cuda.empty_cache() if device == "cuda" else None


class ActorCritic(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 32, 3, 1, 1), nn.MaxPool2d(2, 2), nn.ReLU(),
            nn.Conv2d(32, 32, 3, 1, 1), nn.MaxPool2d(2, 2), nn.ReLU(),
            nn.Conv2d(32, 64, 3, 1, 1), nn.MaxPool2d(2, 2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, 1, 1), nn.MaxPool2d(2, 2), nn.ReLU(),
        )  # fmt: skip
        self.lstm = nn.LSTMCell(1024, 512)
        self.actor = nn.Linear(512, ACTIONS)
        self.critic = nn.Linear(512, 1)

    def forward(self, x, hc):
        hc = self.lstm(self.conv(x).flatten(1), hc)
        return self.actor(hc[0]), self.critic(hc[0]).squeeze(-1), hc


ac = ActorCritic().to(device)
ac_opt = torch.optim.Adam(ac.parameters(), lr=1e-4)
obs_seq = imagined.clone()  # leave inference mode: an ordinary tensor
actions = all_actions.clone()
rewards = all_rewards.clone()
for step in range(2):
    hc = (torch.zeros(IMAG, 512, device=device), torch.zeros(IMAG, 512, device=device))
    logits, values = [], []
    for t in range(FRAMES):
        lg, v, hc = ac(obs_seq[:, t], hc)
        logits.append(lg)
        values.append(v)
    logits, values = torch.stack(logits, 1), torch.stack(values, 1)
    with torch.no_grad():
        lam_returns = torch.empty_like(values)
        last = values[:, -1]
        for t in reversed(range(FRAMES)):
            nxt = values[:, t + 1] if t + 1 < FRAMES else values[:, -1]
            last = rewards[:, t] + 0.995 * (0.05 * nxt + 0.95 * last)
            lam_returns[:, t] = last
    dist = torch.distributions.Categorical(logits=logits)
    adv = (lam_returns - values).detach()
    loss = (
        -(dist.log_prob(actions) * adv).mean()
        - 0.001 * dist.entropy().mean()
        + F.mse_loss(values, lam_returns)
    )
    ac_opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ac.parameters(), 10.0)
    ac_opt.step()
    print(f"actor-critic step {step} loss {loss.item():.4f}")
report("actor-critic in imagination")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
