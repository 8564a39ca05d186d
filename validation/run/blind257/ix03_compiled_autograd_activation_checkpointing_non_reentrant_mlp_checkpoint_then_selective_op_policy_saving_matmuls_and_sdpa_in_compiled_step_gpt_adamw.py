"""Activation checkpointing under compiled autograd. A 6-layer GPT written by hand (width 1024, 16
heads through SDPA causal, MLP 4096 with GELU, vocabulary 8192, fp32 with TF32 matmuls), AdamW
(foreach), batch 8 x 1024, `torch._dynamo.config.compiled_autograd = True` and the backward inside
the compiled step function. First each block's MLP is wrapped in non-reentrant
`torch.utils.checkpoint.checkpoint` (attention not checkpointed): dynamo traces the checkpoint as a
`tag_activation_checkpoint` region, AOTAutograd's partitioner recomputes it in the backward graph, and
compiled autograd pastes that backward into its own graph. Three steps. Then a second compiled step
function checkpoints each whole block with a selective policy (`create_selective_checkpoint_contexts`:
matmuls and the SDPA kernels saved, everything else recomputed, as torchtitan's op-level policy does)
for two steps. Then an evaluation under no_grad. 5 phases."""

import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

torch._dynamo.config.compiled_autograd = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.manual_seed(25703)
V, D, L, H, T, B = 8192, 1024, 6, 16, 1024, 8
aten = torch.ops.aten
SAVE = [
    aten.mm.default,
    aten.addmm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
]
POLICY = {"mode": "mlp"}


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

    def mlp(self, x):
        return self.out(F.gelu(self.fc(self.ln2(x))))

    def attn(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        return self.proj(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        )

    def inner(self, x):
        x = x + self.attn(x)
        return x + self.mlp(x)

    def forward(self, x):
        if POLICY["mode"] == "mlp":
            x = x + self.attn(x)
            return x + checkpoint(self.mlp, x, use_reentrant=False)
        if POLICY["mode"] == "selective":
            ctx = functools.partial(create_selective_checkpoint_contexts, SAVE)
            return checkpoint(self.inner, x, use_reentrant=False, context_fn=ctx)
        return self.inner(x)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[: idx.shape[1]]
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, foreach=True)


def step_fn(idx, tgt):
    loss = F.cross_entropy(model(idx).view(-1, V), tgt.view(-1))
    loss.backward()
    return loss.detach()


def batch():
    idx = torch.randint(0, V, (B, T), device="cuda")
    return idx, torch.roll(idx, -1, dims=1)


report("setup")

mlp_step = torch.compile(step_fn)
mlp_step(*batch())
opt.step()
opt.zero_grad(set_to_none=True)
report("step0_checkpointed_mlps")

for _ in range(2):
    mlp_step(*batch())
    opt.step()
    opt.zero_grad(set_to_none=True)
report("steps1_2_checkpointed_mlps")

POLICY["mode"] = "selective"
torch._dynamo.reset()
sac_step = torch.compile(step_fn)
for _ in range(2):
    sac_step(*batch())
    opt.step()
    opt.zero_grad(set_to_none=True)
report("two_steps_selective_policy_whole_blocks")

POLICY["mode"] = "none"
model.eval()
with torch.no_grad():
    logits = model(batch()[0])
    del logits
report("eval_no_grad")
