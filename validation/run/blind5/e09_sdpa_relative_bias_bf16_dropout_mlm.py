"""Hand-written bidirectional encoder (masked-LM pretraining) whose attention calls
`F.scaled_dot_product_attention` with an explicit float `attn_mask`: a learned T5-style relative-position
bias (bucketed, one per head, shared across layers and receiving gradients) plus a -inf-style padding bias,
built once per forward as a (B, H, T, T) additive mask; `is_causal=False`, `dropout_p=0.1` while training.
bf16 weights end to end, AdamW (foreach default), MLM loss on ~15% of positions, batch 16 x 1024, 3 steps."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

D, HEADS, LAYERS, VOCAB, B, T, BUCKETS = (
    (32, 4, 2, 300, 2, 24, 16) if os.environ.get("SMOKE") else (1024, 16, 12, 32000, 16, 1024, 256)
)
dtype = torch.bfloat16
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(509)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)

    def forward(self, x, bias):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=0.1 if self.training else 0.0, is_causal=False
        )
        return self.out(y.transpose(1, 2).reshape(b, t, D))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = Attention()
        self.ln2 = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, 4 * D)
        self.fc2 = nn.Linear(4 * D, D)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, bias):
        x = x + self.drop(self.attn(self.ln1(x), bias))
        return x + self.drop(self.fc2(F.gelu(self.fc1(self.ln2(x)))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.rel_bias = nn.Embedding(BUCKETS, HEADS)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB)

    def attention_bias(self, pad_mask):
        t = pad_mask.shape[1]
        pos = torch.arange(t, device=pad_mask.device)
        rel = (pos[None, :] - pos[:, None]).clamp(-(BUCKETS // 2), BUCKETS // 2 - 1) + BUCKETS // 2
        bias = self.rel_bias(rel).permute(2, 0, 1).unsqueeze(0)
        pad = torch.zeros(pad_mask.shape, dtype=bias.dtype, device=bias.device)
        pad = pad.masked_fill(~pad_mask, torch.finfo(bias.dtype).min)
        return bias + pad[:, None, None, :]

    def forward(self, ids, pad_mask):
        x = self.embed(ids)
        bias = self.attention_bias(pad_mask)
        for layer in self.layers:
            x = layer(x, bias)
        return self.lm_head(self.ln_f(x))


model = Encoder().to(device=device, dtype=dtype)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, eps=1e-6)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    ids = torch.randint(5, VOCAB, (B, T), device=device)
    lengths = torch.randint(T // 2, T + 1, (B,), device=device)
    pad_mask = torch.arange(T, device=device)[None, :] < lengths[:, None]
    ids = ids.masked_fill(~pad_mask, 0)
    selected = (torch.rand(B, T, device=device) < 0.15) & pad_mask
    labels = ids.masked_fill(~selected, -100)
    inputs = ids.masked_fill(selected, 4)
    logits = model(inputs, pad_mask)
    loss = F.cross_entropy(logits.view(-1, VOCAB).float(), labels.view(-1), ignore_index=-100)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
