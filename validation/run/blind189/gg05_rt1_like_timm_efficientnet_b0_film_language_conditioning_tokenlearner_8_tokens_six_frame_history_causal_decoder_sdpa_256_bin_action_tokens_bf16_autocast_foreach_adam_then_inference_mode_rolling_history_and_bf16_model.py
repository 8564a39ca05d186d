"""An RT-1-like robot transformer (Brohan et al. 2022), written by hand around a timm EfficientNet-B0
image tokenizer (random init, num_classes=0, global_pool="", channels_last): each of the 6 history frames
(224 x 224) is encoded to a 7 x 7 x 1280 map, projected by a 1x1 conv to 512 channels and FiLM-conditioned
on a 512-dim instruction embedding (random stand-in for the Universal Sentence Encoder output; the FiLM
generator's weights zero-initialised so it starts as the identity), then a TokenLearner (LayerNorm + a
2-layer GELU MLP giving 8 spatial attention maps, sigmoid, weighted means) reduces the 49 positions to 8
tokens: 48 tokens per episode step. A decoder-only transformer (8 layers, 512 wide, 8 heads of 64, feed
forward 2048, pre-LN, learned position embeddings) attends causally over frames (a block-causal boolean
mask: a token sees its own frame and earlier ones) with F.scaled_dot_product_attention; the 8 tokens of the
last frame are mean-pooled and a Linear(512, 11 * 256) predicts each of the 11 action dimensions (7 arm, 3
base, 1 mode) as one of 256 bins, cross-entropy against random bins.

Batch 24 episodes (144 frames per step), bf16 autocast, Adam (foreach, lr 1e-4, eps 1e-7) with a
per-parameter-group weight decay. Phases: the first step; 3 more steps; closed-loop inference under
torch.inference_mode for 16 environments over 8 control steps, each step encoding only the new frame and
rolling a (16, 6, 8, 512) token history with torch.cat, the argmax bins moved to the host; then the same
rollout with a .bfloat16() copy of the policy (no autocast). 4 phases."""

import copy
import os

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18905)
if SMALL:
    B, STEPS, RES, N_ENV, CONTROL, LAYERS = 2, 1, 64, 2, 2, 2
else:
    B, STEPS, RES, N_ENV, CONTROL, LAYERS = 24, 3, 224, 16, 8, 8
FRAMES, TOKENS, D, HEADS, FF = 6, 8, 512, 8, 2048
ACT_DIMS, BINS, LANG = 11, 256, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class FiLM(nn.Module):
    def __init__(self, cond_dim, ch):
        super().__init__()
        self.gen = nn.Linear(cond_dim, 2 * ch)
        nn.init.zeros_(self.gen.weight)
        nn.init.zeros_(self.gen.bias)

    def forward(self, x, cond):
        gamma, beta = self.gen(cond).chunk(2, dim=-1)
        return x * (1 + gamma[:, :, None, None]) + beta[:, :, None, None]


class TokenLearner(nn.Module):
    def __init__(self, dim, num_tokens, hidden=64):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, num_tokens))

    def forward(self, x):  # (N, HW, C)
        attn = torch.sigmoid(self.mlp(self.norm(x))).transpose(1, 2)  # (N, T, HW)
        return torch.einsum("nth,nhc->ntc", attn, x) / x.shape[1]


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D))

    def forward(self, x, mask):
        b, n, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1 if self.training else 0.0)
        x = x + self.proj(y.transpose(1, 2).reshape(b, n, D))
        return x + self.mlp(self.ln2(x))


class RT1(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = timm.create_model("efficientnet_b0", pretrained=False, num_classes=0, global_pool="")
        self.reduce = nn.Conv2d(1280, D, 1)
        self.film = FiLM(LANG, D)
        self.token_learner = TokenLearner(D, TOKENS)
        self.pos = nn.Parameter(torch.zeros(1, FRAMES * TOKENS, D))
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, ACT_DIMS * BINS)
        frame = torch.arange(FRAMES * TOKENS) // TOKENS
        self.register_buffer("mask", frame[:, None] >= frame[None, :])

    def tokenize(self, frames, lang):  # frames (N, 3, H, W), lang (N, LANG)
        fmap = self.film(self.reduce(self.backbone(frames)), lang)
        return self.token_learner(fmap.flatten(2).transpose(1, 2))  # (N, TOKENS, D)

    def transformer(self, tokens):  # (B, FRAMES * TOKENS, D)
        x = tokens + self.pos
        for blk in self.blocks:
            x = blk(x, self.mask)
        x = self.ln_f(x)[:, -TOKENS:].mean(1)
        return self.head(x).view(-1, ACT_DIMS, BINS)

    def forward(self, video, lang):  # video (B, FRAMES, 3, H, W)
        b = video.shape[0]
        lang_rep = lang[:, None].expand(b, FRAMES, LANG).reshape(b * FRAMES, LANG)
        frames = video.flatten(0, 1).contiguous(memory_format=torch.channels_last)
        tokens = self.tokenize(frames, lang_rep).view(b, FRAMES * TOKENS, D)
        return self.transformer(tokens)


policy = RT1().to(device).to(memory_format=torch.channels_last)
decay = [p for n, p in policy.named_parameters() if p.ndim >= 2 and not n.startswith("pos")]
other = [p for n, p in policy.named_parameters() if not (p.ndim >= 2 and not n.startswith("pos"))]
opt = torch.optim.Adam(
    [{"params": decay, "weight_decay": 1e-5}, {"params": other, "weight_decay": 0.0}],
    lr=1e-4,
    eps=1e-7,
    foreach=True,
)
print(f"params {sum(p.numel() for p in policy.parameters()) / 1e6:.1f}M")
if device == "cuda":
    print(f"policy {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def train_step():
    video = torch.randn(B, FRAMES, 3, RES, RES, device=device)
    lang = torch.randn(B, LANG, device=device)
    bins = torch.randint(0, BINS, (B, ACT_DIMS), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = policy(video, lang)
    loss = F.cross_entropy(logits.float().reshape(-1, BINS), bins.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.item()


policy.train()
print(f"step 0 loss {train_step():.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(1, STEPS + 1):
    loss = train_step()
    print(f"step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


@torch.inference_mode()
def rollout(net, dtype, use_amp):
    lang = torch.randn(N_ENV, LANG, device=device, dtype=dtype)
    history = torch.zeros(N_ENV, FRAMES, TOKENS, D, device=device, dtype=dtype)
    chosen = []
    for _ in range(CONTROL):
        frame = torch.rand(N_ENV, 3, RES, RES, device=device, dtype=dtype).contiguous(
            memory_format=torch.channels_last
        )
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
            tok = net.tokenize(frame, lang)
            history = torch.cat([history[:, 1:], tok[:, None].to(dtype)], dim=1)
            logits = net.transformer(history.flatten(1, 2))
        chosen.append(logits.argmax(-1).cpu())
    return torch.stack(chosen, 1)


policy.eval()
acts = rollout(policy, torch.float32, amp)
print(f"rollout bins {tuple(acts.shape)}")
if device == "cuda":
    print(f"rollout peak {torch.cuda.max_memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

bf16_policy = copy.deepcopy(policy).bfloat16()
acts = rollout(bf16_policy, torch.bfloat16, False)
print(f"bf16 rollout bins {tuple(acts.shape)}")
if device == "cuda":
    print(f"bf16 rollout allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
