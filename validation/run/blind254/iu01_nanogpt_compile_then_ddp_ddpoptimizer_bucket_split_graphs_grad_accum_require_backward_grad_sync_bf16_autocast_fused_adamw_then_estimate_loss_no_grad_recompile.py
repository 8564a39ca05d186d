"""nanoGPT's train.py on one rank: a GPT (6 layers, d 768, 12 heads, vocab 50304, block 512, no bias,
weight tying, flash attention through SDPA) built in fp32, `configure_optimizers`' fused AdamW with two
weight-decay groups, then `model = torch.compile(model)` and `model = DDP(model, device_ids=[0])` as
train.py does, with `bucket_cap_mb=10` so that the parameters span several buckets and dynamo's
DDPOptimizer splits the compiled graph at the bucket boundaries (`torch._dynamo.config.optimize_ddp`,
torch/_dynamo/backends/distributed.py; left at its default). Gradient accumulation as train.py does it:
4 micro-steps of batch 8 x 512 under bf16 autocast, `model.require_backward_grad_sync` set only on the
last, loss divided by the steps, `clip_grad_norm_(1.0)`, `optimizer.zero_grad(set_to_none=True)`;
3 iterations. Then `estimate_loss()` (model.eval(), 4 batches under `torch.no_grad()` and autocast: a
recompile of the eval graphs), then 2 more iterations after model.train(). Process group:
init_process_group('nccl') with rank 0 of 1 and MASTER_ADDR/PORT set by the script. 4 phases."""

import math
import os
import socket

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

with socket.socket() as s:
    s.bind(("localhost", 0))
    os.environ["MASTER_PORT"] = str(s.getsockname()[1])
os.environ.update(MASTER_ADDR="localhost", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
dist.init_process_group(backend="nccl")
ddp_local_rank = int(os.environ["LOCAL_RANK"])
device = f"cuda:{ddp_local_rank}"
torch.cuda.set_device(device)
torch.manual_seed(1337)

N_LAYER, N_HEAD, N_EMBD, VOCAB, BLOCK = 6, 12, 768, 50304, 512
BATCH, ACCUM = 8, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD, bias=False)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, bias=False)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD, bias=False)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(VOCAB, N_EMBD),
                wpe=nn.Embedding(BLOCK, N_EMBD),
                h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
                ln_f=nn.LayerNorm(N_EMBD, bias=False),
            )
        )
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        nodecay = [p for p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": weight_decay}, {"params": nodecay, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, fused=True)


model = GPT()
model.to(device)
optimizer = model.configure_optimizers(0.1, 6e-4, (0.9, 0.95))
model = torch.compile(model)
model = DDP(model, device_ids=[ddp_local_rank], bucket_cap_mb=10)
raw_model = model.module
ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16)
gen = torch.Generator().manual_seed(0)


def get_batch():
    x = torch.randint(0, VOCAB, (BATCH, BLOCK), generator=gen)
    y = torch.randint(0, VOCAB, (BATCH, BLOCK), generator=gen)
    return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)


X, Y = get_batch()
report("setup")


def train_iters(n):
    global X, Y
    for _ in range(n):
        for micro_step in range(ACCUM):
            model.require_backward_grad_sync = micro_step == ACCUM - 1
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / ACCUM
            X, Y = get_batch()
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    del logits, loss


train_iters(3)
report("train_compiled_ddp_grad_accum")


@torch.no_grad()
def estimate_loss():
    model.eval()
    losses = torch.zeros(4)
    for k in range(4):
        x, y = get_batch()
        with ctx:
            logits, loss = model(x, y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


print("val loss", float(estimate_loss()))
report("estimate_loss_no_grad")

train_iters(2)
report("train_after_eval")
dist.destroy_process_group()
