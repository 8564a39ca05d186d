"""nanoGPT's train.py loop on one GPU, written out by hand: the GPT-2 small model of model.py (12 x 768, 12
heads, block 1024, vocabulary 50304, no biases, tied lm_head, SDPA `is_causal`), `configure_optimizers` with
its decay / no-decay groups and `fused=True` AdamW, `ctx = torch.amp.autocast(device_type, dtype=bfloat16)`,
`scaler = torch.amp.GradScaler(enabled=(dtype == "float16"))` (off for bf16, so every scaler call passes
through), `get_batch` stacking random windows of a uint16 token array on the host, `pin_memory()` and
`non_blocking=True`, the next batch fetched while the GPU runs the micro-step,
`loss / gradient_accumulation_steps`, `clip_grad_norm_(1.0)` after `scaler.unscale_`, the cosine `get_lr` with
warmup written into each param group, and `estimate_loss()` under `no_grad` with `model.eval()`.

Then llm.c's chunked classifier idea by hand: the final hidden states are cut into chunks of rows and each
chunk's logits and summed cross-entropy are computed inside `torch.utils.checkpoint(use_reentrant=False)`,
so the (B*T, 50304) logits never exist at once (the backward recomputes one chunk at a time).

Phases: 0 model and fused AdamW; 1 three iterations of 4 micro-steps of 8 x 1024 tokens; 2 estimate_loss
(4 batches each of train and val); 3 two iterations of 2 micro-steps of 16 x 1024 with the chunked classifier
loss (chunks of 2048 rows); 4 the chunked loss alone under no_grad at 32 x 1024."""

import math
import os

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1337)
device = "cuda" if torch.cuda.is_available() else "cpu"
device_type = "cuda" if "cuda" in device else "cpu"
dtype = "bfloat16"
if SMALL:
    n_layer, n_head, n_embd, block_size, vocab_size = 2, 4, 64, 64, 512
    batch_size, gradient_accumulation_steps, chunk_rows = 2, 2, 32
else:
    n_layer, n_head, n_embd, block_size, vocab_size = 12, 12, 768, 1024, 50304
    batch_size, gradient_accumulation_steps, chunk_rows = 8, 4, 2048
learning_rate, min_lr, warmup_iters, lr_decay_iters = 6e-4, 6e-5, 2, 10
weight_decay, beta1, beta2, grad_clip, eval_iters = 1e-1, 0.9, 0.95, 1.0, 4


def report(tag):
    if device_type == "cuda":
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(tag)


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=False)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        k = k.view(B, T, n_head, C // n_head).transpose(1, 2)
        q = q.view(B, T, n_head, C // n_head).transpose(1, 2)
        v = v.view(B, T, n_head, C // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(n_embd, bias=False)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(n_embd, bias=False)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block() for _ in range(n_layer)]),
                ln_f=LayerNorm(n_embd, bias=False),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def hidden(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.transformer.ln_f(x)

    def forward(self, idx, targets):
        logits = self.lm_head(self.hidden(idx))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        print(f"num decayed parameter tensors: {len(decay_params)}, {sum(p.numel() for p in decay_params):,}")
        use_fused = device_type == "cuda"
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=(beta1, beta2), fused=use_fused)


def chunk_loss(h, w, targets):
    logits = F.linear(h, w).float()
    return F.cross_entropy(logits, targets, reduction="sum")


def chunked_classifier_loss(model, idx, targets):
    """llm.c's fused classifier by hand: summed CE per chunk of rows, logits recomputed in backward."""
    h = model.hidden(idx).view(-1, n_embd)
    t = targets.view(-1)
    total = h.new_zeros((), dtype=torch.float32)
    for s in range(0, h.size(0), chunk_rows):
        total = total + checkpoint(
            chunk_loss,
            h[s : s + chunk_rows],
            model.lm_head.weight,
            t[s : s + chunk_rows],
            use_reentrant=False,
        )
    return total / t.numel()


data = {
    "train": torch.randint(0, 50257 if not SMALL else vocab_size, (2_000_000,), dtype=torch.int32).to(
        torch.uint16
    ),
    "val": torch.randint(0, 50257 if not SMALL else vocab_size, (200_000,), dtype=torch.int32).to(
        torch.uint16
    ),
}


def get_batch(split, bs=None):
    bs = bs or batch_size
    d = data[split]
    ix = torch.randint(len(d) - block_size, (bs,))
    x = torch.stack([d[i : i + block_size].to(torch.int64) for i in ix])
    y = torch.stack([d[i + 1 : i + 1 + block_size].to(torch.int64) for i in ix])
    if device_type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x, y


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


model = GPT().to(device)
print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M")
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))
optimizer = model.configure_optimizers()
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = torch.amp.autocast(device_type=device_type, dtype=ptdtype)
report("model and fused AdamW")

X, Y = get_batch("train")
for iter_num in range(3):
    lr = get_lr(iter_num)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    for _micro_step in range(gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        X, Y = get_batch("train")
        scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item() * gradient_accumulation_steps
    print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}")
report("nanoGPT gradient accumulation iterations")

losses = estimate_loss()
print(f"train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
report("estimate_loss")

del logits, loss
accum2 = 2
for iter_num in range(3, 5):
    for param_group in optimizer.param_groups:
        param_group["lr"] = get_lr(iter_num)
    for _micro_step in range(accum2):
        X, Y = get_batch("train", 2 * batch_size)
        with ctx:
            loss = chunked_classifier_loss(model, X, Y) / accum2
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"iter {iter_num}: chunked loss {loss.item() * accum2:.4f}")
report("llm.c-style chunked checkpointed classifier loss")

model.eval()
with torch.no_grad(), ctx:
    X, Y = get_batch("val", 4 * batch_size)
    val = chunked_classifier_loss(model, X, Y)
print(f"chunked val loss {val.item():.4f}")
report("chunked loss under no_grad")
