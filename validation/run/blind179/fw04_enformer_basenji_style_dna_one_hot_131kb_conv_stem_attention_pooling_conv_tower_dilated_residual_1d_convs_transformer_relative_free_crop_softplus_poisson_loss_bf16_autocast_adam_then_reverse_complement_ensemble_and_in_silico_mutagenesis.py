"""A DNA sequence-to-coverage model after Enformer (Avsec et al. 2021, deepmind-research/enformer and
lucidrains/enformer-pytorch) and Basenji2 (Kelley 2020), written by hand at reduced width: one-hot DNA
(4 x 131,072 bp from `F.one_hot` of seeded `torch.randint`), a stem Conv1d(4, 192, 15) with a
residual conv block (BatchNorm1d, GELU, Conv1d k=1) and Enformer's attention pooling (pool size 2: a
1 x 1 Conv1d to the softmax logits over each pair of positions, the weighted sum), a conv tower of 6
blocks widening 192 -> 384 (k=5, each followed by attention pooling) down to 1,024 positions at 128 bp,
Basenji's dilated residual tower (8 layers of BatchNorm1d, GELU, Conv1d k=3 with dilation 1.5^i rounded,
a pointwise Conv1d, dropout 0.3, residual), 2 transformer layers (nn.MultiheadAttention, 8 heads,
pre-norm, feed-forward x2), a crop of 64 positions at either end (896 bins as Enformer), a pointwise
Conv1d to 768 channels with dropout and GELU, and heads of 1,643 (human) and 512 (mouse) tracks with
Softplus; Poisson NLL (`F.poisson_nll_loss(log_input=False)`) on seeded gamma-like targets. bf16
autocast, Adam (lr 5e-4) with gradient clipping 0.2, batch 4; the first step its own phase, then 3
steps (alternating human and mouse heads as Enformer's training does); then evaluation under
inference_mode with Basenji's reverse-complement and shift ensemble (flip of the one-hot over the
sequence and channel axes, +-2 bp rolls) at batch 8; then in silico saturation mutagenesis of a
1,024-bp window (the 3 alternative bases at each of 256 positions, 768 variants in batches of 32 under
no_grad, fp32, reference minus alternative at the centre bins); 4 phases."""

import itertools
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17904)
if SMALL:
    SEQ, C0, C1, TOWER, DIL, TRANS, B, STEPS, EVAL_B, CROP, H_TRACKS, M_TRACKS, ISM_POS, ISM_B = (
        4096,
        16,
        32,
        3,
        3,
        1,
        2,
        2,
        2,
        4,
        8,
        4,
        4,
        4,
    )
else:
    SEQ, C0, C1, TOWER, DIL, TRANS, B, STEPS, EVAL_B, CROP, H_TRACKS, M_TRACKS, ISM_POS, ISM_B = (
        131072,
        192,
        384,
        6,
        8,
        2,
        4,
        4,
        8,
        64,
        1643,
        512,
        256,
        32,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"


class AttentionPool(nn.Module):
    def __init__(self, dim, pool_size=2):
        super().__init__()
        self.pool_size = pool_size
        self.to_attn_logits = nn.Conv2d(dim, dim, 1, bias=False)
        nn.init.dirac_(self.to_attn_logits.weight)
        with torch.no_grad():
            self.to_attn_logits.weight.mul_(2)

    def forward(self, x):  # [B, C, N]
        b, c, n = x.shape
        x = x.view(b, c, n // self.pool_size, self.pool_size)
        logits = self.to_attn_logits(x)
        attn = logits.softmax(dim=-1)
        return (x * attn).sum(dim=-1)


def conv_block(c_in, c_out, k):
    return nn.Sequential(nn.BatchNorm1d(c_in), nn.GELU(), nn.Conv1d(c_in, c_out, k, padding=k // 2))


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return x + self.fn(x)


class DilatedResidual(nn.Module):
    def __init__(self, c, dilation):
        super().__init__()
        self.bn1 = nn.BatchNorm1d(c)
        self.conv1 = nn.Conv1d(c, c // 2, 3, padding=dilation, dilation=dilation)
        self.bn2 = nn.BatchNorm1d(c // 2)
        self.conv2 = nn.Conv1d(c // 2, c, 1)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        y = self.conv1(F.gelu(self.bn1(x)))
        y = self.drop(self.conv2(F.gelu(self.bn2(y))))
        return x + y


class TransformerLayer(nn.Module):
    def __init__(self, d, heads=8):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=0.05, batch_first=True)
        self.norm2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(
            nn.Linear(d, 2 * d), nn.Dropout(0.4), nn.ReLU(), nn.Linear(2 * d, d), nn.Dropout(0.4)
        )

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.ff(self.norm2(x))


class SeqModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv1d(4, C0, 15, padding=7), Residual(conv_block(C0, C0, 1)), AttentionPool(C0)
        )
        widths = torch.linspace(C0, C1, TOWER + 1).round().int().tolist()
        tower = []
        for c_in, c_out in itertools.pairwise(widths):
            tower += [conv_block(c_in, c_out, 5), Residual(conv_block(c_out, c_out, 1)), AttentionPool(c_out)]
        self.tower = nn.Sequential(*tower)
        self.dilated = nn.Sequential(*[DilatedResidual(C1, round(1.5**i)) for i in range(DIL)])
        self.transformer = nn.Sequential(*[TransformerLayer(C1) for _ in range(TRANS)])
        self.pointwise = nn.Sequential(conv_block(C1, 2 * C1, 1), nn.Dropout(0.05), nn.GELU())
        self.heads = nn.ModuleDict(
            {"human": nn.Conv1d(2 * C1, H_TRACKS, 1), "mouse": nn.Conv1d(2 * C1, M_TRACKS, 1)}
        )

    def forward(self, x, head):  # x: [B, 4, SEQ]
        x = self.dilated(self.tower(self.stem(x)))
        x = self.transformer(x.transpose(1, 2)).transpose(1, 2)
        x = x[:, :, CROP:-CROP]
        x = self.pointwise(x)
        return F.softplus(self.heads[head](x))  # [B, tracks, bins]


def one_hot_dna(bs):
    bases = torch.randint(0, 4, (bs, SEQ), device=device)
    return F.one_hot(bases, 4).float().transpose(1, 2)


model = SeqModel().to(device)
bins = SEQ // 2 ** (TOWER + 1) - 2 * CROP
print(f"params {sum(p.numel() for p in model.parameters())} bins {bins}")
optimizer = torch.optim.Adam(model.parameters(), lr=5e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    head = "human" if step % 2 == 0 else "mouse"
    tracks = H_TRACKS if head == "human" else M_TRACKS
    x = one_hot_dna(B)
    target = -torch.log(torch.rand(B, tracks, bins, device=device)) * 2.0
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        pred = model(x, head)
    loss = F.poisson_nll_loss(pred.float(), target, log_input=False)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.2)
    optimizer.step()
    print(f"step {step} {head} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del x, target, pred, loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    x = one_hot_dna(EVAL_B)
    preds = []
    for rc in (False, True):
        for shift in (-2, 0, 2):
            xs = torch.roll(x, shifts=shift, dims=2)
            if rc:
                xs = xs.flip(dims=(1, 2))
            p = model(xs, "human").float()
            preds.append(p.flip(dims=(2,)) if rc else p)
    ensemble = torch.stack(preds).mean(0)
    target = -torch.log(torch.rand_like(ensemble)) * 2.0
    corr = F.cosine_similarity(
        ensemble - ensemble.mean(2, keepdim=True), target - target.mean(2, keepdim=True), dim=2
    )
print(f"eval {tuple(ensemble.shape)} corr {corr.mean().item():.4f}")
del x, preds, p, xs, ensemble, target, corr
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    ref = one_hot_dna(1)
    centre = SEQ // 2
    ref_pred = model(ref, "human")[:, :, bins // 2 - 4 : bins // 2 + 4]
    variants = []
    for pos in range(centre - ISM_POS // 2, centre + ISM_POS // 2):
        cur = int(ref[0, :, pos].argmax())
        for alt in range(4):
            if alt != cur:
                variants.append((pos, alt))
    effects = torch.empty(len(variants), H_TRACKS, device=device)
    for start in range(0, len(variants), ISM_B):
        chunk = variants[start : start + ISM_B]
        xb = ref.repeat(len(chunk), 1, 1)
        for i, (pos, alt) in enumerate(chunk):
            xb[i, :, pos] = 0
            xb[i, alt, pos] = 1
        alt_pred = model(xb, "human")[:, :, bins // 2 - 4 : bins // 2 + 4]
        effects[start : start + len(chunk)] = (alt_pred - ref_pred).sum(-1)
print(f"ism {tuple(effects.shape)} max {effects.abs().max().item():.4f}")
if device == "cuda":
    print(
        f"ism allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
