"""A GPT-2-small-sized decoder, hand-written (12 layers, d 768, tied embedding and head, SDPA causal
attention), trained under bf16 autocast with fused AdamW (no weight decay on norms and biases) and
clip_grad_value_, its weights averaged each step into a torch.optim.swa_utils.AveragedModel EMA
(get_ema_multi_avg_fn(0.999), use_buffers=True); batch 16 x 1024 tokens, 3 steps; then the EMA
copy evaluated under no_grad and bf16 autocast on 8 sequences; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11201)
B, T, L, D, NH, STEPS = (2, 64, 2, 64, 4, 1) if SMALL else (16, 1024, 12, 768, 12, 3)
V = 50304
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, NH, D // NH).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


model = GPT().to(device)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=6e-4,
    betas=(0.9, 0.95),
    fused=amp,
)
ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(0.999), use_buffers=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(STEPS):
    idx = torch.randint(0, V, (B, T + 1), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.view(-1, V), idx[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    ema.update_parameters(model)
    if device == "cuda":
        print(f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
    del idx, logits, loss
ema.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    idx = torch.randint(0, V, (8, T + 1), device=device)
    logits = ema(idx[:, :-1])
    ppl = F.cross_entropy(logits.float().view(-1, V), idx[:, 1:].reshape(-1)).exp()
if device == "cuda":
    print(
        f"eval ppl {ppl.item():.1f} "
        f"peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
