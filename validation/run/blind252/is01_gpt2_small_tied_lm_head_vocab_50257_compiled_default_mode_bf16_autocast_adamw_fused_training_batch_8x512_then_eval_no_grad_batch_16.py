"""A GPT-2-style language model as nanoGPT writes it: 4 layers, d 768, 12 heads through SDPA, context 512, the
GPT-2 vocabulary of 50,257 tokens with the lm_head tied to the token embedding (fp32 weights), compiled with
`torch.compile(model)` (default mode) and trained under bf16 autocast with fused AdamW, batch 8 x 512: the
first step (compile), then two more steps; then evaluation under `no_grad` at batch 16 (a recompile:
eval mode and a new batch), then one more training step.

The lm_head's matmuls have N = 50,257 (not a multiple of 8): Inductor's pad_mm pass considers padding them
at compile time. No value-dependent sizes. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2521)
V, D, H, L, T, B = 50257, 768, 12, 4, 512, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.c_attn, self.c_proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.c_fc, self.mlp_proj = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, D))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(T, D)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        self.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, V), targets.reshape(-1))


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
cmodel = torch.compile(model)
data = torch.randint(0, V, (4, B, T + 1), device="cuda")
report("setup")


def train_step(i):
    x, y = data[i % 4, :, :-1], data[i % 4, :, 1:]
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = cmodel(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


train_step(0)
report("first_step_compile")

for i in range(1, 3):
    train_step(i)
report("steps_2_3")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    xb = data[:2, :, :-1].reshape(2 * B, T)
    logits = cmodel(xb)
    nll = F.cross_entropy(logits.float().view(-1, V), data[:2, :, 1:].reshape(-1))
    print("eval nll", round(nll.item(), 3))
    del logits, nll
report("eval_batch_16")

model.train()
train_step(3)
report("train_again")
