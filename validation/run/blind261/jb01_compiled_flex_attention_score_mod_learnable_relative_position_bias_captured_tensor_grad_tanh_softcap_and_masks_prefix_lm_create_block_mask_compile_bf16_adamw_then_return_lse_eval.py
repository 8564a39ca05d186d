"""FlexAttention with score_mods in compiled training: a 4-layer GPT (d 1024, 16 heads of 64, MLP 4096,
vocab 32000, bf16 weights, AdamW foreach) whose attention is `flex_attention` inside a `torch.compile`d
model, with a `score_mod` that closes over a learnable per-head relative-position bias table (an
nn.Parameter of shape (16, 2T - 1) read as `rel_bias[h, q_idx - kv_idx + T - 1]`: a captured buffer that
requires grad, so the compiled backward also returns its gradient) and a Gemma-2 style tanh softcap
(50.0) on the scores. The causal + sliding window (512) BlockMask is made by
`create_block_mask(and_masks(causal, window), ..., _compile=True)` (create_block_mask itself compiled).
Three steps at batch 4 x 2048. Then a prefix-LM mask (the first 256 tokens of every row see each
other, `or_masks(prefix, causal)`, per-batch prefix lengths from a fixed tensor) for two steps. Then
evaluation under no_grad with `return_lse=True` (the logsumexp kept as an output and averaged).

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import and_masks, create_block_mask, flex_attention, or_masks

torch.manual_seed(2611)
V, D, H, L, T, B, WINDOW, SOFTCAP = 32000, 1024, 16, 4, 2048, 4, 512, 50.0


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def window(b, h, q_idx, kv_idx):
    return q_idx - kv_idx < WINDOW


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D), nn.RMSNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)
        self.rel_bias = nn.Parameter(torch.zeros(H, 2 * T - 1))

    def forward(self, x, block_mask, return_lse=False):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        rel_bias = self.rel_bias

        def biased_softcap(score, bb, h, q_idx, kv_idx):
            score = score + rel_bias[h, q_idx - kv_idx + T - 1]
            return SOFTCAP * torch.tanh(score / SOFTCAP)

        out = flex_attention(q, k, v, score_mod=biased_softcap, block_mask=block_mask, return_lse=return_lse)
        lse = None
        if return_lse:
            out, lse = out
        x = x + self.o(out.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x)), approximate="tanh")), lse


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, block_mask, return_lse=False):
        x = self.emb(idx)
        lses = []
        for blk in self.blocks:
            x, lse = blk(x, block_mask, return_lse)
            lses.append(lse)
        return self.head(self.norm(x)), lses


model = GPT().to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
compiled = torch.compile(model)
window_mask = create_block_mask(and_masks(causal, window), None, None, T, T, device="cuda", _compile=True)
report("setup_and_compiled_create_block_mask")


def step(block_mask):
    idx = torch.randint(0, V, (B, T), device="cuda")
    tgt = torch.randint(0, V, (B, T), device="cuda")
    logits, _ = compiled(idx, block_mask)
    loss = F.cross_entropy(logits.view(-1, V).float(), tgt.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.detach()


for _ in range(3):
    loss = step(window_mask)
print("window+bias+softcap loss", round(loss.item(), 3))
report("train_window_relative_bias_softcap_three_steps")

prefix_len = torch.tensor([256, 128, 512, 64], device="cuda")


def prefix(b, h, q_idx, kv_idx):
    return kv_idx < prefix_len[b]


prefix_mask = create_block_mask(or_masks(prefix, causal), B, None, T, T, device="cuda", _compile=True)
for _ in range(2):
    loss = step(prefix_mask)
print("prefix-lm loss", round(loss.item(), 3))
report("train_prefix_lm_or_masks_two_steps")

model.eval()
with torch.no_grad():
    idx = torch.randint(0, V, (B, T), device="cuda")
    logits, lses = compiled(idx, window_mask, True)
    mean_lse = torch.stack([lse.float().mean() for lse in lses])
    print("mean lse per layer", mean_lse.shape, logits.shape)
    del logits, lses, mean_lse
report("eval_no_grad_return_lse")
