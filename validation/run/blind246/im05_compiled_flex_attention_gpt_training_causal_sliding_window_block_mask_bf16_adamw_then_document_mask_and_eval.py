"""Compiled FlexAttention in training: a 4-layer GPT (d 768, 12 heads of 64, vocab 32000, bf16 weights,
AdamW foreach) whose attention is `flex_attention` with a `BlockMask` from `create_block_mask`: causal
with a sliding window of 256 tokens, batch 8 x 2048 tokens. The whole model is `torch.compile`d (flex
attention lowers to Inductor's Triton templates, forward and backward). Three training steps; then a
document mask (causal within fixed documents of 512 tokens, a new BlockMask from a `mask_mod` closing
over a document-id tensor) for two steps; then evaluation under no_grad at batch 16 with the sliding
window mask made for that batch size.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

torch.manual_seed(2465)
V, D, H, L, T, B, WINDOW = 32000, 768, 12, 4, 2048, 8, 256


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def sliding_window_causal(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D, bias=False), nn.Linear(D, D, bias=False)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D, bias=False), nn.Linear(4 * D, D, bias=False)

    def forward(self, x, block_mask):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        y = flex_attention(q, k, v, block_mask=block_mask)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, block_mask):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, block_mask)
        return self.head(self.norm(x))


model = GPT().to(device="cuda", dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
compiled = torch.compile(model)
window_mask = create_block_mask(sliding_window_causal, None, None, T, T, device="cuda")
report("setup_and_sliding_window_block_mask")


def step(block_mask):
    idx = torch.randint(0, V, (B, T), device="cuda")
    tgt = torch.randint(0, V, (B, T), device="cuda")
    loss = F.cross_entropy(compiled(idx, block_mask).view(-1, V).float(), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(3):
    step(window_mask)
report("train_sliding_window_three_steps")

doc_id = (torch.arange(T, device="cuda") // 512).expand(B, T).contiguous()


def document_causal(b, h, q_idx, kv_idx):
    return (doc_id[b, q_idx] == doc_id[b, kv_idx]) & (q_idx >= kv_idx)


doc_mask = create_block_mask(document_causal, B, None, T, T, device="cuda")
for _ in range(2):
    step(doc_mask)
report("train_document_mask_two_steps")

model.eval()
with torch.no_grad():
    logits = compiled(torch.randint(0, V, (16, T), device="cuda"), window_mask)
    del logits
report("eval_no_grad_batch16")
