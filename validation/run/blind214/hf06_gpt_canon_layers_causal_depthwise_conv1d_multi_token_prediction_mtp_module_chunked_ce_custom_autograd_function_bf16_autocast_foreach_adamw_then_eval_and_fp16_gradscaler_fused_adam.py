"""A GPT with Canon layers and a DeepSeek-V3-style multi-token-prediction module, written by hand.

Model: 12 pre-norm blocks of d_model 1024 (16 heads, SDPA is_causal, rotary by hand, GELU MLP 4x,
RMSNorm), vocabulary 32,768, context 1024. Canon layers (Allen-Zhu's "Physics of Language Models" part
4.1): before attention and before the MLP of every block, a causal depthwise nn.Conv1d of kernel 4 over the
sequence (padding 3, the last 3 outputs cut) added residually. The main head predicts token t+1; one MTP
module predicts t+2: RMSNorm of the trunk's output and RMSNorm of the embedding of token t+1 concatenated,
a Linear 2D -> D, one more block, then the shared final norm and the shared (untied) output head; the
loss is the main loss plus 0.3 x the MTP loss.

The output head and cross entropy are a custom torch.autograd.Function computing the loss in chunks of
4096 rows (fp32 logits of one chunk at a time; it saves only the hidden states and per-row logsumexps and
recomputes each chunk's logits in backward, accumulating the head's gradient in fp32).

Phases: the first step at batch 8 under bf16 autocast with foreach AdamW (lr 6e-4, wd 0.1) and clipping;
3 more steps; evaluation under inference_mode (main and MTP losses) at batch 16; then the optimizer
replaced by fused Adam and fp16 autocast with torch.amp.GradScaler at batch 12 (scale, unscale_, clip,
step, update), 3 steps. 4 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2146)
if SMALL:
    VOCAB, D, LAYERS, HEADS, CTX, BATCH, CHUNK = 512, 128, 2, 4, 64, 2, 48
else:
    VOCAB, D, LAYERS, HEADS, CTX, BATCH, CHUNK = 32768, 1024, 12, 16, 1024, 8, 4096
HD = D // HEADS
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(f"{tag}: peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()


class ChunkedHeadCE(torch.autograd.Function):
    """Mean cross entropy of (h @ W.T) against targets, never holding all the logits."""

    @staticmethod
    def forward(ctx, h, weight, targets):
        n = h.shape[0]
        w = weight.to(h.dtype)
        lse = torch.empty(n, dtype=torch.float32, device=h.device)
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        for s in range(0, n, CHUNK):
            logits = (h[s : s + CHUNK] @ w.t()).float()
            lse[s : s + CHUNK] = torch.logsumexp(logits, dim=-1)
            picked = logits.gather(1, targets[s : s + CHUNK, None]).squeeze(1)
            total += (lse[s : s + CHUNK] - picked).sum()
        ctx.save_for_backward(h, weight, targets, lse)
        return total / n

    @staticmethod
    def backward(ctx, grad_out):
        h, weight, targets, lse = ctx.saved_tensors
        n = h.shape[0]
        w = weight.to(h.dtype)
        grad_h = torch.empty_like(h)
        grad_w = torch.zeros_like(weight, dtype=torch.float32)
        scale = grad_out / n
        for s in range(0, n, CHUNK):
            hc = h[s : s + CHUNK]
            p = torch.exp((hc @ w.t()).float() - lse[s : s + CHUNK, None])
            p[torch.arange(p.shape[0], device=p.device), targets[s : s + CHUNK]] -= 1
            p = (p * scale).to(h.dtype)
            grad_h[s : s + CHUNK] = p @ w
            grad_w += (p.t() @ hc).float()
        return grad_h, grad_w.to(weight.dtype), None


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Canon(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(D, D, kernel_size=4, groups=D, padding=3)

    def forward(self, x):
        t = x.shape[1]
        return x + self.conv(x.transpose(1, 2))[..., :t].transpose(1, 2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1 = nn.RMSNorm(D)
        self.canon_a = Canon()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.n2 = nn.RMSNorm(D)
        self.canon_m = Canon()
        self.fc = nn.Linear(D, 4 * D, bias=False)
        self.down = nn.Linear(4 * D, D, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        h = self.canon_a(self.n1(x))
        q, k, v = self.qkv(h).view(b, t, 3, HEADS, HD).permute(2, 0, 3, 1, 4)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, D))
        h = self.canon_m(self.n2(x))
        return x + self.down(F.gelu(self.fc(h)))


class MTPGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.mtp_norm_h = nn.RMSNorm(D)
        self.mtp_norm_e = nn.RMSNorm(D)
        self.mtp_proj = nn.Linear(2 * D, D, bias=False)
        self.mtp_block = Block()
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HD, 2).float() / HD))
        freqs = torch.outer(torch.arange(CTX).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, idx):
        # idx: (B, CTX + 2); the trunk reads CTX tokens, the MTP module CTX - 1 of them.
        x_in, t = idx[:, :CTX], CTX
        x = self.embed(x_in)
        for blk in self.blocks:
            x = blk(x, self.cos[:t], self.sin[:t])
        h = self.norm(x)
        main = ChunkedHeadCE.apply(h.reshape(-1, D), self.head.weight, idx[:, 1 : t + 1].reshape(-1))
        e_next = self.embed(idx[:, 1:t])
        m = self.mtp_proj(torch.cat((self.mtp_norm_h(x[:, : t - 1]), self.mtp_norm_e(e_next)), dim=-1))
        m = self.mtp_block(m, self.cos[: t - 1], self.sin[: t - 1])
        hm = self.norm(m)
        mtp = ChunkedHeadCE.apply(hm.reshape(-1, D), self.head.weight, idx[:, 2 : t + 1].reshape(-1))
        return main, mtp


model = MTPGPT().to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)


def bf16_step():
    idx = torch.randint(0, VOCAB, (BATCH, CTX + 2), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        main, mtp = model(idx)
        loss = main + 0.3 * mtp
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return main.item(), mtp.item()


model.train()
main, mtp = bf16_step()
print(f"step 0 losses {main:.4f} {mtp:.4f}")
report("first step")
for _ in range(3):
    losses = bf16_step()
print(f"step 3 losses {losses[0]:.4f} {losses[1]:.4f}")
report("train")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    idx = torch.randint(0, VOCAB, (2 * BATCH, CTX + 2), device=device)
    main, mtp = model(idx)
    print(f"eval main {main.item():.4f} mtp {mtp.item():.4f}")
report("eval")

model.train()
del opt
opt = torch.optim.Adam(model.parameters(), lr=3e-4, fused=device == "cuda")
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for i in range(3):
    idx = torch.randint(0, VOCAB, (BATCH * 3 // 2, CTX + 2), device=device)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        main, mtp = model(idx)
        loss = main + 0.3 * mtp
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"fp16 step {i} loss {loss.item():.4f} scale {scaler.get_scale()}")
report("fp16 gradscaler")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
