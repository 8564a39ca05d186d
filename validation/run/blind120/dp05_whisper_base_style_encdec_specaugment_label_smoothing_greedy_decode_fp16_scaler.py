"""A Whisper-base-shaped encoder-decoder written by hand after openai/whisper's model.py: two Conv1d
stems over 80 x 3000 log-mel frames (the second stride 2, GELU), sinusoidal audio positions, 6
pre-LN residual attention blocks of width 512 (8 heads, key projection without bias, SDPA) in each of
the encoder and the decoder (causal self-attention and cross-attention), Whisper's LayerNorm that
runs in float32 and casts back, a learned 448-position text embedding and logits against the token
embedding's transpose over a 51,865 vocabulary; a fine-tune with SpecAugment on the GPU (2
frequency masks up to 27 bins, 2 time masks up to 100 frames, per example, masked_fill with the
mean), variable transcript lengths padded with -100, label-smoothed cross entropy, fp16 autocast
with GradScaler, AdamW with a linear-warmup LambdaLR, batch 32, 3 steps; then greedy decoding of 24
tokens (no cache, the whole prefix each step) for 8 clips under inference_mode; 5 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12005)
MELS, FRAMES, D, H, L, VOCAB, TCTX = (80, 3000, 512, 8, 6, 51865, 448)
B, TLEN, BE, NEW = (2, 16, 2, 4) if SMALL else (32, 128, 8, 24)
if SMALL:
    FRAMES, D, L, VOCAB = 200, 64, 2, 1000
SOT, EOT = VOCAB - 1, VOCAB - 2
device = "cuda" if torch.cuda.is_available() else "cpu"


class LayerNorm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x.float()).type(x.dtype)


def sinusoids(length, channels, max_timescale=10000):
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class MultiHeadAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query, self.key = nn.Linear(D, D), nn.Linear(D, D, bias=False)
        self.value, self.out = nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x, xa=None, causal=False):
        q = self.query(x)
        k, v = self.key(x if xa is None else xa), self.value(x if xa is None else xa)
        n_ctx = q.shape[1]
        q, k, v = (t.view(*t.shape[:2], H, -1).permute(0, 2, 1, 3) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=causal and n_ctx > 1)
        return self.out(a.permute(0, 2, 1, 3).flatten(start_dim=2))


class ResidualAttentionBlock(nn.Module):
    def __init__(self, cross):
        super().__init__()
        self.attn, self.attn_ln = MultiHeadAttention(), LayerNorm(D)
        self.cross_attn = MultiHeadAttention() if cross else None
        self.cross_attn_ln = LayerNorm(D) if cross else None
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.mlp_ln = LayerNorm(D)

    def forward(self, x, xa=None, causal=False):
        x = x + self.attn(self.attn_ln(x), causal=causal)
        if self.cross_attn is not None:
            x = x + self.cross_attn(self.cross_attn_ln(x), xa)
        return x + self.mlp(self.mlp_ln(x))


class AudioEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(MELS, D, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(D, D, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positional_embedding", sinusoids(FRAMES // 2, D))
        self.blocks = nn.ModuleList(ResidualAttentionBlock(False) for _ in range(L))
        self.ln_post = LayerNorm(D)

    def forward(self, x):
        x = F.gelu(self.conv1(x))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = (x + self.positional_embedding).to(x.dtype)
        for block in self.blocks:
            x = block(x)
        return self.ln_post(x)


class TextDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, D)
        self.positional_embedding = nn.Parameter(torch.empty(TCTX, D).normal_(0, 0.01))
        self.blocks = nn.ModuleList(ResidualAttentionBlock(True) for _ in range(L))
        self.ln = LayerNorm(D)

    def forward(self, x, xa):
        x = self.token_embedding(x) + self.positional_embedding[: x.shape[-1]]
        x = x.to(xa.dtype)
        for block in self.blocks:
            x = block(x, xa, causal=True)
        x = self.ln(x)
        return (x @ torch.transpose(self.token_embedding.weight.to(x.dtype), 0, 1)).float()


class Whisper(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = AudioEncoder(), TextDecoder()

    def forward(self, mel, tokens):
        return self.decoder(tokens, self.encoder(mel))


def mask_along_axis_iid(spec, mask_param, axis, mask_value):
    value = torch.rand(spec.shape[0], device=spec.device) * mask_param
    min_value = torch.rand(spec.shape[0], device=spec.device) * (spec.size(axis) - value)
    mask_start, mask_end = min_value.long()[:, None, None], (min_value.long() + value.long())[:, None, None]
    idx = torch.arange(spec.size(axis), device=spec.device)
    idx = idx[None, :, None] if axis == 1 else idx[None, None, :]
    return spec.masked_fill((idx >= mask_start) & (idx < mask_end), mask_value)


def spec_augment(mel):
    fill = mel.mean()
    for _ in range(2):
        mel = mask_along_axis_iid(mel, 27, 1, fill)
    for _ in range(2):
        mel = mask_along_axis_iid(mel, 100, 2, fill)
    return mel


model = Whisper().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 500))
scaler = torch.amp.GradScaler(device, init_scale=4096.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    mel = torch.randn(B, MELS, FRAMES, device=device).clamp_(-1.5, 1.5)
    mel = spec_augment(mel)
    tokens = torch.randint(0, VOCAB - 100, (B, TLEN + 1), device=device)
    tokens[:, 0] = SOT
    lengths = torch.randint(TLEN // 4, TLEN + 1, (B, 1), device=device)
    pos = torch.arange(TLEN + 1, device=device)[None]
    tokens = torch.where(pos == lengths, torch.full_like(tokens, EOT), tokens)
    labels = tokens[:, 1:].masked_fill(pos[:, 1:] > lengths, -100)
    with torch.autocast(device, dtype=torch.float16):
        logits = model(mel, tokens[:, :-1])
        loss = F.cross_entropy(
            logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=-100, label_smoothing=0.1
        )
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del mel, tokens, labels, logits, loss

model.eval()
with torch.inference_mode(), torch.autocast(device, dtype=torch.float16):
    mel = torch.randn(BE, MELS, FRAMES, device=device)
    audio = model.encoder(mel)
    tokens = torch.full((BE, 1), SOT, dtype=torch.long, device=device)
    done = torch.zeros(BE, dtype=torch.bool, device=device)
    for _ in range(NEW):
        nxt = model.decoder(tokens, audio)[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, EOT), nxt)
        done |= nxt == EOT
        tokens = torch.cat([tokens, nxt[:, None]], dim=-1)
if device == "cuda":
    print(
        f"decode {tuple(tokens.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
