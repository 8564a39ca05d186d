"""A SMILES transformer after Honda et al. 2019 ("SMILES Transformer"), ChemBERTa (Chithrananda et al.
2020) and MolBERT, written by hand with torch.nn: a character-level SMILES vocabulary of 64 tokens
(pad 0, cls 1, eos 2, mask 3), a learned token embedding scaled by sqrt(d_model) plus sinusoidal
positions (a registered buffer), nn.TransformerEncoder of 6 layers (d_model 512, 8 heads, feed-forward
2048, GELU, batch_first, post-norm so the fast path may use nested tensors), seeded-length padded
batches (lengths 24..128) with src_key_padding_mask. Phase by phase: masked-token pre-training (15% of
the non-pad tokens masked by seeded `torch.rand`, the tied output projection, cross entropy with
ignore_index) in fp32 with Adam (betas 0.9, 0.98) under the Noam warm-up schedule (LambdaLR), batch
256, the first step its own phase, then 3 steps; then fine-tuning for 12 molecular properties
(QM9/ESOL-like regression from the cls token, masked-mean pooling concatenated, an MLP head, MSE) under
bf16 autocast with fused AdamW (lr 5e-5) and a frozen embedding, 3 steps at batch 384; then virtual
screening of 4,096 molecules in chunks of 1,024 under inference_mode with model.eval(), where
nn.TransformerEncoder takes its fast path (the padding mask turned into nested tensors), top-k scores
kept on the GPU; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17905)
if SMALL:
    D, HEADS, FF, LAYERS, MAXLEN, B, STEPS, FT_B, SCREEN_N, SCREEN_B = 32, 4, 64, 2, 24, 4, 2, 4, 16, 8
else:
    D, HEADS, FF, LAYERS, MAXLEN, B, STEPS, FT_B, SCREEN_N, SCREEN_B = (
        512,
        8,
        2048,
        6,
        128,
        256,
        4,
        384,
        4096,
        1024,
    )
VOCAB, PAD, CLS, EOS, MASK, NPROP = 64, 0, 1, 2, 3, 12
device = "cuda" if torch.cuda.is_available() else "cpu"


class PositionalEncoding(nn.Module):
    def __init__(self, d, max_len=512):
        super().__init__()
        pos = torch.arange(max_len).unsqueeze(1)
        div = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        pe = torch.zeros(max_len, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class SmilesTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=PAD)
        self.pos = PositionalEncoding(D)
        self.drop = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=True)
        self.lm_norm = nn.LayerNorm(D)
        self.lm_bias = nn.Parameter(torch.zeros(VOCAB))
        self.prop_head = nn.Sequential(nn.Linear(2 * D, D), nn.GELU(), nn.Dropout(0.1), nn.Linear(D, NPROP))

    def encode(self, ids):
        pad = ids == PAD
        x = self.drop(self.pos(self.embed(ids) * math.sqrt(D)))
        return self.encoder(x, src_key_padding_mask=pad), pad

    def mlm_logits(self, h):
        return F.linear(self.lm_norm(h), self.embed.weight, self.lm_bias)

    def properties(self, h, pad):
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        mean = (h * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.prop_head(torch.cat([h[:, 0], mean], dim=-1))


def smiles_batch(bs):
    lengths = torch.randint(MAXLEN * 3 // 16, MAXLEN - 1, (bs,))
    width = int(lengths.max()) + 2
    ids = torch.full((bs, width), PAD, dtype=torch.long)
    body = torch.randint(4, VOCAB, (bs, width))
    pos = torch.arange(width)[None, :]
    ids = torch.where(pos <= lengths[:, None], body, ids)
    ids[:, 0] = CLS
    ids[torch.arange(bs), lengths + 1] = EOS
    return ids.to(device)


model = SmilesTransformer().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
noam = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda s: D**-0.5 * min((s + 1) ** -0.5, (s + 1) * 4000**-1.5)
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    ids = smiles_batch(B)
    maskable = ids > MASK
    chosen = (torch.rand(ids.shape, device=device) < 0.15) & maskable
    labels = ids.masked_fill(~chosen, -100)
    inputs = ids.masked_fill(chosen, MASK)
    h, _ = model.encode(inputs)
    logits = model.mlm_logits(h)
    loss = F.cross_entropy(logits.view(-1, VOCAB), labels.view(-1), ignore_index=-100)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    noam.step()
    print(f"mlm step {step} width {ids.shape[1]} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del ids, maskable, chosen, labels, inputs, h, logits, loss
if device == "cuda":
    print(f"mlm peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del optimizer, noam
model.embed.weight.requires_grad_(False)
ft_opt = torch.optim.AdamW(
    [p for p in model.parameters() if p.requires_grad], lr=5e-5, weight_decay=0.01, fused=device == "cuda"
)
for step in range(3):
    ids = smiles_batch(FT_B)
    y = torch.randn(FT_B, NPROP, device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        h, pad = model.encode(ids)
        pred = model.properties(h, pad)
    loss = F.mse_loss(pred.float(), y)
    ft_opt.zero_grad(set_to_none=True)
    loss.backward()
    ft_opt.step()
    print(f"finetune step {step} loss {loss.item():.4f}")
del ids, y, h, pad, pred, loss
if device == "cuda":
    print(f"finetune peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
scores = []
with torch.inference_mode():
    for _chunk in range(SCREEN_N // SCREEN_B):
        ids = smiles_batch(SCREEN_B)
        h, pad = model.encode(ids)
        if h.is_nested:
            h = h.to_padded_tensor(0.0, ids.shape)
        scores.append(model.properties(h, pad)[:, 0])
    scores = torch.cat(scores)
    best = torch.topk(scores, 16)
print(f"screened {scores.numel()} best {best.values[0].item():.4f} at {best.indices[0].item()}")
if device == "cuda":
    print(
        f"screen allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
