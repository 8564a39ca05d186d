"""A GPT-2-style decoder written by hand (12 layers, 1,536 wide, 12 heads, GELU MLP of 6,144,
vocabulary 50,304, tied head, SDPA causal attention) whose blocks run under
torch.utils.checkpoint(use_reentrant=False) with selective activation checkpointing: a context_fn of
functools.partial(create_selective_checkpoint_contexts, policy). Four policies, one optimizer step
each with gradient accumulation over 2 micro-batches of 4 x 2,048 under bf16 autocast (fp32
parameters, fused AdamW, clipping): the policy that saves every matmul (mm, addmm, bmm) and the
attention kernel's outputs and recomputes the rest; torchtitan's policy that saves every other mm
(a fresh counter of mm and addmm per checkpointed call) and the attention; full checkpointing (no context_fn);
no checkpointing. Then one more step with the first policy and an evaluation loss under
inference_mode; 7 phases."""

import functools
import math
import os
from collections import defaultdict

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15302)
if SMALL:
    V, D, L, H, B, T, ACC = 512, 64, 2, 4, 2, 64, 2
else:
    V, D, L, H, B, T, ACC = 50304, 1536, 12, 12, 4, 2048, 2
device = "cuda" if torch.cuda.is_available() else "cpu"
amp_dtype = torch.bfloat16
aten = torch.ops.aten
ATTENTION = {
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
}
MATMULS = {aten.mm.default, aten.addmm.default, aten.bmm.default}


def save_matmuls_policy(ctx, op, *args, **kwargs):
    if op in MATMULS or op in ATTENTION:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def every_other_mm_context():
    # torchtitan's selective_checkpointing_context_fn: a fresh counter for every checkpointed call
    meta = defaultdict(int)

    def policy(ctx, op, *args, **kwargs):
        mode = "recompute" if ctx.is_recompute else "forward"
        key = f"{mode}_mm_count"
        if op in (aten.mm.default, aten.addmm.default):
            meta[key] += 1
        to_save = op in ATTENTION or (op in (aten.mm.default, aten.addmm.default) and meta[key] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.Linear(D, 3 * D)
        self.proj = nn.Linear(D, D)
        self.ln2 = nn.LayerNorm(D)
        self.fc = nn.Linear(D, 4 * D)
        self.fc_out = nn.Linear(4 * D, D)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn(self.ln1(x)).split(D, dim=2)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, D))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, D)
        self.wpe = nn.Embedding(T, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.wte.weight
        self.apply(self._init)
        for n, p in self.named_parameters():
            if n.endswith("proj.weight") or n.endswith("fc_out.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L))
        self.mode = "none"
        self.context_fn = None

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            if self.mode == "none" or not self.training:
                x = blk(x)
            elif self.mode == "full":
                x = checkpoint(blk, x, use_reentrant=False)
            else:
                x = checkpoint(blk, x, use_reentrant=False, context_fn=self.context_fn)
        return self.head(self.ln_f(x))


model = GPT().to(device)
opt = torch.optim.AdamW(
    model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)
data = torch.randint(0, V, (8 * ACC, B, T + 1), device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

batch_no = 0


def train_step(tag, mode, context_fn=None):
    global batch_no
    model.mode, model.context_fn = mode, context_fn
    for _ in range(ACC):
        chunk = data[batch_no % data.shape[0]]
        batch_no += 1
        with torch.autocast(device_type=device, dtype=amp_dtype):
            logits = model(chunk[:, :-1])
            loss = F.cross_entropy(logits.view(-1, V), chunk[:, 1:].reshape(-1))
        (loss / ACC).backward()
        del logits
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"{tag} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model.train()
save_mm = functools.partial(create_selective_checkpoint_contexts, save_matmuls_policy)
train_step("sac save matmuls", "sac", save_mm)
train_step("sac every other mm", "sac", every_other_mm_context)
train_step("full checkpoint", "full")
train_step("no checkpoint", "none")
train_step("sac save matmuls again", "sac", save_mm)

model.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=amp_dtype):
    chunk = data[-1]
    val = F.cross_entropy(model(chunk[:, :-1]).view(-1, V), chunk[:, 1:].reshape(-1))
if device == "cuda":
    print(
        f"val loss {val.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
