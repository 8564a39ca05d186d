"""Ghost clipping as in Li et al. 2022 ("Large Language Models Can Be Strong Differentially Private
Learners", the private-transformers PrivacyEngine) written by hand on a GPT-2-small-like decoder (12
layers, d 768, 12 heads, MLP 3,072, learned positions indexed per sample, pre-LN,
F.scaled_dot_product_attention is_causal, untied lm_head over a 32,000 vocabulary; about 134M fp32
parameters) trained under bf16 autocast with AdamW(fused=True, lr 5e-4). Per-sample gradient norms
without per-sample gradients: forward hooks keep each Linear/Embedding/LayerNorm input, full backward
hooks take the backprops and add each sample's squared norm to a (B,) fp32 buffer: Linear by the ghost
norm `sum((a @ a^T) * (g @ g^T))` over (B, T, T) Gram matrices, Embedding by the same with the
token-equality mask in place of a @ a^T, LayerNorm from its per-sample (B, d) gradients. The first
backward is of the summed per-token losses (`retain_graph=True`), the second of the per-sample losses
weighted by the clip factors `(C / norm).clamp(max=1)`; then Gaussian noise (sigma 0.8, C 1.0) is added
to the clipped sum, divided by the batch, and AdamW steps. Batch 16 of 512 int64 tokens: the first step
its own phase, then 3 steps; evaluation perplexity over 4 batches of 32 under no_grad with bf16
autocast; then the mixed ghost norm of Bu et al. (a layer's per-sample gradient is materialized with
einsum when 2 T^2 > in x out) at batch 8 of 1,024 tokens, 2 steps; 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18203)
if SMALL:
    VOCAB, D, LAYERS, HEADS, B, T, EVAL_B, LONG_B, LONG_T = 500, 64, 2, 4, 2, 32, 4, 2, 64
else:
    VOCAB, D, LAYERS, HEADS, B, T, EVAL_B, LONG_B, LONG_T = 32000, 768, 12, 12, 16, 512, 32, 8, 1024
C, SIGMA = 1.0, 0.8
device = "cuda" if torch.cuda.is_available() else "cpu"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D)
        self.qkv = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln_2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.fc_out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, D))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, D)
        self.wpe = nn.Embedding(2048, D)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(D)
        self.lm_head = nn.Linear(D, VOCAB, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device).unsqueeze(0).expand_as(idx)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class GhostClipping:
    def __init__(self, model, mixed=False):
        self.model = model
        self.mixed = mixed
        self.norm_pass = False
        self.sq_norms = None
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding, nn.LayerNorm)):
                m.register_forward_hook(self.save_input)
                m.register_full_backward_hook(self.accumulate_norm)

    def save_input(self, module, inputs, output):
        if torch.is_grad_enabled():
            module.saved_input = inputs[0].detach()

    def accumulate_norm(self, module, grad_input, grad_output):
        if not self.norm_pass:
            return
        a = module.saved_input
        g = grad_output[0].detach().float()
        if isinstance(module, nn.Embedding):
            same = (a.unsqueeze(2) == a.unsqueeze(1)).float()
            sq = (same * torch.bmm(g, g.transpose(1, 2))).sum(dim=(1, 2))
        elif isinstance(module, nn.LayerNorm):
            normed = F.layer_norm(a.float(), module.normalized_shape, eps=module.eps)
            sq = (normed * g).sum(1).pow(2).sum(1) + g.sum(1).pow(2).sum(1)
        else:
            a = a.float()
            t = a.shape[1]
            if self.mixed and 2 * t * t > module.in_features * module.out_features:
                per_sample = torch.einsum("nti,ntj->nij", g, a)
                sq = per_sample.flatten(1).pow(2).sum(1)
                del per_sample
            else:
                sq = (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum(dim=(1, 2))
            if module.bias is not None:
                sq = sq + g.sum(1).pow(2).sum(1)
        self.sq_norms += sq

    def step(self, optimizer, idx, targets):
        self.sq_norms = torch.zeros(idx.shape[0], device=idx.device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = self.model(idx)
        per_token = F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1), reduction="none")
        per_sample = per_token.view(idx.shape[0], -1).mean(1)
        self.norm_pass = True
        per_sample.sum().backward(retain_graph=True)
        self.norm_pass = False
        optimizer.zero_grad(set_to_none=True)
        norms = self.sq_norms.sqrt()
        factors = (C / (norms + 1e-6)).clamp(max=1.0)
        (per_sample * factors).sum().backward()
        for p in self.model.parameters():
            p.grad.add_(torch.randn_like(p.grad), alpha=SIGMA * C).div_(idx.shape[0])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        for m in self.model.modules():
            m.__dict__.pop("saved_input", None)
        return per_sample.detach().mean(), norms


model = GPT().to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")
engine = GhostClipping(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4, weight_decay=0.0, fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(4):
    data = torch.randint(0, VOCAB, (B, T + 1), device=device)
    loss, norms = engine.step(optimizer, data[:, :-1], data[:, 1:])
    print(f"step {step} loss {loss.item():.4f} median norm {norms.median().item():.3f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del data, loss, norms
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
total = 0.0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(4):
        data = torch.randint(0, VOCAB, (EVAL_B, T + 1), device=device)
        logits = model(data[:, :-1])
        total += F.cross_entropy(logits.float().view(-1, VOCAB), data[:, 1:].reshape(-1)).item()
print(f"eval ppl {math.exp(total / 4):.1f}")
del data, logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

engine.mixed = True
model.train()
for step in range(2):
    data = torch.randint(0, VOCAB, (LONG_B, LONG_T + 1), device=device)
    loss, norms = engine.step(optimizer, data[:, :-1], data[:, 1:])
    print(f"long step {step} loss {loss.item():.4f} max norm {norms.max().item():.3f}")
if device == "cuda":
    print(
        f"long allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
