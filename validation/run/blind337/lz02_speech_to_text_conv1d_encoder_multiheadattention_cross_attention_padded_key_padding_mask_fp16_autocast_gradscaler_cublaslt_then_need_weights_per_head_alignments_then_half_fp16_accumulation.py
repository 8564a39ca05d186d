"""A speech-to-text model written with `nn.MultiheadAttention` (batch_first) throughout: a log-mel front
end of two Conv1d (the second stride 2) with GELU and sinusoidal positions, 6 encoder layers, and a
6-layer decoder whose self-attention takes a boolean causal `attn_mask` plus a boolean `key_padding_mask`
for padded transcripts and whose cross-attention takes the encoder's padded-frame `key_padding_mask`
(clips of 8 to 30 s at 100 frames/s, lengths drawn on the host). Batch 24, width 768, 12 heads,
vocabulary 16k, tied output embedding.

Phases: 0 model, AdamW (foreach) and GradScaler; 1 three training steps under fp16 autocast with
`torch.backends.cuda.preferred_blas_library("cublaslt")`, every attention with need_weights=False;
2 an evaluation pass under no_grad + fp16 autocast whose last two decoder layers' cross-attentions are
called with need_weights=True, average_attn_weights=False to keep per-head (B, 12, T, S) alignments
(the alignment-head timestamps idea), reduced to a per-token argmax frame; 3 the model cast to
`.half()`, `torch.backends.cuda.matmul.allow_fp16_accumulation = True` and
`preferred_blas_library("cublas")`, encoder run once, then 24 greedy decoding steps that re-run the
decoder over the growing prefix (no cache) under inference_mode."""

import math

import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(3372)
gen = torch.Generator().manual_seed(3372)
dev = "cuda"
D, H, LE, LD, V, MEL, B, T, STEPS, NEW = 768, 12, 6, 6, 16384, 80, 24, 96, 3, 24
MAXF = 3000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def sinusoids(n, d):
    inv = torch.exp(-math.log(10000.0) * torch.arange(d // 2) / (d // 2 - 1))
    t = torch.arange(n)[:, None] * inv[None, :]
    return torch.cat([t.sin(), t.cos()], dim=1)


class EncLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x, pad):
        h = self.n1(x)
        x = x + self.attn(h, h, h, key_padding_mask=pad, need_weights=False)[0]
        return x + self.mlp(self.n2(x))


class DecLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2, self.n3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.self_attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.cross = nn.MultiheadAttention(D, H, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, y, mem, causal, tgt_pad, mem_pad, want_weights=False):
        h = self.n1(y)
        y = y + self.self_attn(h, h, h, attn_mask=causal, key_padding_mask=tgt_pad, need_weights=False)[0]
        h = self.n2(y)
        a, w = self.cross(
            h, mem, mem, key_padding_mask=mem_pad, need_weights=want_weights, average_attn_weights=False
        )
        y = y + a
        return y + self.mlp(self.n3(y)), w


class SpeechToText(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(MEL, D, 3, padding=1)
        self.conv2 = nn.Conv1d(D, D, 3, stride=2, padding=1)
        self.register_buffer("enc_pos", sinusoids(MAXF // 2, D), persistent=False)
        self.enc = nn.ModuleList(EncLayer() for _ in range(LE))
        self.enc_norm = nn.LayerNorm(D)
        self.tok = nn.Embedding(V, D)
        self.dec_pos = nn.Parameter(torch.randn(448, D) * 0.01)
        self.dec = nn.ModuleList(DecLayer() for _ in range(LD))
        self.dec_norm = nn.LayerNorm(D)

    def encode(self, mel, frames):
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).transpose(1, 2)
        x = x + self.enc_pos[: x.shape[1]]
        pad = torch.arange(x.shape[1], device=dev)[None, :] >= ((frames + 1) // 2)[:, None]
        for layer in self.enc:
            x = layer(x, pad)
        return self.enc_norm(x), pad

    def decode(self, ids, mem, mem_pad, tgt_pad=None, weights_from=None):
        n = ids.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool, device=dev).triu(1)
        y = self.tok(ids) + self.dec_pos[:n]
        maps = []
        for i, layer in enumerate(self.dec):
            want = weights_from is not None and i >= weights_from
            y, w = layer(y, mem, causal, tgt_pad, mem_pad, want)
            if want:
                maps.append(w)
        return self.dec_norm(y) @ self.tok.weight.t(), maps


def batch():
    frames = torch.randint(800, MAXF + 1, (B,), generator=gen)
    tlen = torch.randint(T // 3, T + 1, (B,), generator=gen)
    mel = torch.randn(B, MEL, MAXF, device=dev)
    mel = mel * (torch.arange(MAXF, device=dev)[None, None, :] < frames.to(dev)[:, None, None])
    ids = torch.randint(0, V, (B, T + 1), device=dev)
    tgt_pad = torch.arange(T, device=dev)[None, :] >= tlen.to(dev)[:, None]
    return mel, frames.to(dev), ids, tgt_pad


model = SpeechToText().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01, foreach=True)
scaler = torch.amp.GradScaler("cuda")
report("model, optimizer, scaler")

torch.backends.cuda.preferred_blas_library("cublaslt")
for step in range(STEPS):
    mel, frames, ids, tgt_pad = batch()
    with torch.autocast("cuda", dtype=torch.float16):
        mem, mem_pad = model.encode(mel, frames)
        logits, _ = model.decode(ids[:, :-1], mem, mem_pad, tgt_pad)
        labels = ids[:, 1:].masked_fill(tgt_pad, -100)
        loss = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}")
del mem, logits, loss
report("fp16 autocast gradscaler training cublaslt")

model.eval()
mel, frames, ids, tgt_pad = batch()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
    mem, mem_pad = model.encode(mel, frames)
    logits, maps = model.decode(ids[:, :-1], mem, mem_pad, tgt_pad, weights_from=LD - 2)
    align = torch.stack(maps, dim=1).float()  # (B, 2 layers, 12 heads, T, S)
    frame_of_token = align.mean(dim=(1, 2)).argmax(dim=-1)
print("alignments", tuple(align.shape), "frames", frame_of_token[0, :6].tolist())
del maps, align, logits, mem
report("need_weights per-head cross-attention alignments")

model.half()
torch.backends.cuda.matmul.allow_fp16_accumulation = True
torch.backends.cuda.preferred_blas_library("cublas")
with torch.inference_mode():
    mem, mem_pad = model.encode(mel.half(), frames)
    out = torch.full((B, 1), 1, dtype=torch.long, device=dev)
    for _ in range(NEW):
        logits, _ = model.decode(out, mem, mem_pad)
        out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
print("decoded", tuple(out.shape))
report("half greedy decode fp16 accumulation cublas")
