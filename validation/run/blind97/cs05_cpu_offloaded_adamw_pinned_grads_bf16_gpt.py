"""A GPT (12 layers, 768 wide, nn.TransformerEncoderLayer blocks with a causal mask, vocabulary
32,000) trained with its optimizer offloaded to the host, as ZeRO-Offload does by hand: bf16 weights
and gradients on the GPU, fp32 master weights and AdamW state on the CPU; after each backward every
gradient is copied into a pinned host buffer (non_blocking, then one synchronize), the CPU AdamW
(foreach) steps the masters, and the updated masters go back through pinned bf16 staging buffers
into the GPU weights (non_blocking); batch 8 x 1,024 tokens, 3 steps, then a no_grad eval of the
same batch; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9705)
if SMALL:
    VOCAB, D, H, LAYERS, B, L = 128, 64, 4, 2, 2, 32
else:
    VOCAB, D, H, LAYERS, B, L = 32000, 768, 12, 12, 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
pin = device == "cuda"


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(L, D)
        layer = nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        causal = nn.Transformer.generate_square_subsequent_mask(
            ids.shape[1], device=ids.device, dtype=x.dtype
        )
        x = self.blocks(x, mask=causal, is_causal=True)
        return self.head(self.ln(x))


model = GPT()
masters = [p.detach().clone().float() for p in model.parameters()]
for m in masters:
    m.requires_grad_(True)
model = model.to(device=device, dtype=torch.bfloat16)
params = list(model.parameters())
grad_bufs = [torch.empty(p.shape, dtype=torch.bfloat16, pin_memory=pin) for p in params]
stage = [torch.empty(p.shape, dtype=torch.bfloat16, pin_memory=pin) for p in params]
optimizer = torch.optim.AdamW(masters, lr=3e-4, weight_decay=0.1, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(0, VOCAB, (B, L + 1), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.view(-1, VOCAB).float(), ids[:, 1:].reshape(-1))
    loss.backward()
    for p, buf in zip(params, grad_bufs, strict=True):
        buf.copy_(p.grad, non_blocking=True)
        p.grad = None
    if device == "cuda":
        torch.cuda.synchronize()
    for m, buf in zip(masters, grad_bufs, strict=True):
        m.grad = buf.float()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        for p, m, s in zip(params, masters, stage, strict=True):
            s.copy_(m)
            p.copy_(s, non_blocking=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del logits, loss
model.eval()
with torch.no_grad():
    logits = model(ids[:, :-1])
    eval_loss = F.cross_entropy(logits.view(-1, VOCAB).float(), ids[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"eval {eval_loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
