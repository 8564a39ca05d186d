"""An activation-memory study on one transformer encoder, the way a "fit a bigger batch" blog post walks
through PyTorch's knobs: the same training step run plainly, with activations offloaded by
`torch.autograd.graph.save_on_cpu`, with a hand-written `saved_tensors_hooks` pair that stores fp32
activations as bf16, under selective activation checkpointing, and with in-place residual updates made
legal by `allow_mutation_on_saved_tensors`.

Encoder: 12 pre-norm blocks, width 1,024, 16 heads (SDPA), MLP 4,096 with GELU, learned positions, a
mean-pooled 1,000-class head; inputs are 8 x 1,024 token embeddings fed straight in. Phases: (1) two plain
AdamW steps under bf16 autocast; (2) two steps with `save_on_cpu(pin_memory=True)` around the forward;
(3) two fp32 steps (no autocast) under `saved_tensors_hooks` whose pack casts float32 tensors of more than
a million elements to bf16 (keeping the dtype) and whose unpack casts back; (4) two steps with every
block under `checkpoint(use_reentrant=False, context_fn=partial(create_selective_checkpoint_contexts,
policy))`, the policy saving matmul and attention outputs (MUST_SAVE) and recomputing the rest
(PREFER_RECOMPUTE); (5) two steps of a variant forward that adds the branches into the residual stream
in place (`x.add_`), run inside `torch.autograd.graph.allow_mutation_on_saved_tensors()`."""

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

torch.manual_seed(30905)
device = "cuda" if torch.cuda.is_available() else "cpu"
WIDTH, HEADS, LAYERS, MLP, SEQ, B, CLASSES = 1024, 16, 12, 4096, 1024, 8, 1000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.out = nn.Linear(WIDTH, WIDTH)
        self.fc1 = nn.Linear(WIDTH, MLP)
        self.fc2 = nn.Linear(MLP, WIDTH)

    def attn(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        return self.out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, WIDTH))

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)

    def forward_inplace(self, x):
        x.add_(self.attn(x))
        return x.add_(self.mlp(x))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.pos = nn.Parameter(torch.randn(SEQ, WIDTH) * 0.02)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x, mode="plain"):
        x = x + self.pos
        for block in self.blocks:
            if mode == "sac":
                x = checkpoint(
                    block,
                    x,
                    use_reentrant=False,
                    context_fn=partial(create_selective_checkpoint_contexts, policy),
                )
            elif mode == "inplace":
                x = block.forward_inplace(x)
            else:
                x = block(x)
        return self.head(self.ln(x).mean(1))


SAVE_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
}


def policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in SAVE_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def pack_bf16(t):
    if t.dtype == torch.float32 and t.numel() > 1_000_000:
        return (t.dtype, t.to(torch.bfloat16))
    return (None, t)


def unpack_bf16(packed):
    dtype, t = packed
    return t if dtype is None else t.to(dtype)


model = Encoder().to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)


def step(mode="plain", autocast=True, hooks=None):
    x = torch.randn(B, SEQ, WIDTH, device=device)
    y = torch.randint(0, CLASSES, (B,), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
        if hooks is not None:
            with hooks:
                logits = model(x, mode)
        else:
            logits = model(x, mode)
    loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


# Phase 1: plain.
for _ in range(2):
    loss = step()
print("plain", loss)
report("phase 1 plain bf16")

# Phase 2: offload saved activations to pinned host memory.
for _ in range(2):
    loss = step(hooks=torch.autograd.graph.save_on_cpu(pin_memory=True))
print("save_on_cpu", loss)
report("phase 2 save_on_cpu")

# Phase 3: fp32 with bf16-compressed saved activations.
for _ in range(2):
    loss = step(autocast=False, hooks=torch.autograd.graph.saved_tensors_hooks(pack_bf16, unpack_bf16))
print("bf16-packed fp32", loss)
report("phase 3 saved_tensors_hooks compression")

# Phase 4: selective activation checkpointing.
for _ in range(2):
    loss = step(mode="sac")
print("selective checkpoint", loss)
report("phase 4 selective checkpoint")

# Phase 5: in-place residuals under allow_mutation_on_saved_tensors.
for _ in range(2):
    with torch.autograd.graph.allow_mutation_on_saved_tensors():
        loss = step(mode="inplace")
print("in-place residual", loss)
report("phase 5 allow_mutation_on_saved_tensors")
