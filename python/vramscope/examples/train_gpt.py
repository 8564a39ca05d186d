"""A GPT-2-small-sized language model, one bf16 training step with fused AdamW.

The built-in example of `vramscope run --example`: an ordinary PyTorch
script that runs unchanged on a GPU, with the phases users mark themselves.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
vocab, width, heads, layers, context, batch = 50304, 768, 12, 12, 1024, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


model = GPT().to(device, torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
idx = torch.randint(0, vocab, (batch, context), device=device)
print(f"parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")

if device == "cuda":
    torch.cuda.reset_peak_memory_stats()  # phase: load
logits = model(idx)
loss = F.cross_entropy(logits.view(-1, vocab).float(), idx.view(-1))
if device == "cuda":
    print(f"forward peak: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()  # phase: forward
loss.backward()
optimizer.step()
optimizer.zero_grad(set_to_none=True)
if device == "cuda":
    print(f"backward + step peak: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
