"""`torch.cond` in a training loop: a 4-layer GPT-style model (d 1024, 16 heads through SDPA, vocab 16000)
whose feed-forward in every block is chosen by `torch.cond` between a heavy branch (MLP 4096 with GELU)
and a light branch (one d x d projection), on a predicate computed on the GPU from a step counter tensor
(`(step % 2) == 0`: even steps take the heavy branch). Under autograd `torch.cond` saves its operands only
and its backward recomputes the branch (torch/_higher_order_ops/cond.py `CondAutogradOp`).
fp32 weights, AdamW (foreach), batch 8 x 512, two steps (one per branch); then evaluation under no_grad
on both branches; then two bf16-autocast steps.

The predicate's value comes from a counter the program sets: no value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2411)
V, D, H, L, T, B = 16000, 1024, 16, 4, 512, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.o = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc1, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.light = nn.Linear(D, D)

    def heavy_ff(self, h):
        return self.fc2(F.gelu(self.fc1(h)))

    def light_ff(self, h):
        return self.light(h)

    def forward(self, x, pred):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D))
        return x + torch.cond(pred, self.heavy_ff, self.light_ff, (self.n2(x),))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx, pred):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x, pred)
        return self.head(x)


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
step = torch.zeros((), dtype=torch.long, device="cuda")
idx = torch.randint(0, V, (B, T), device="cuda")
tgt = torch.randint(0, V, (B, T), device="cuda")
report("setup")

for _ in range(2):
    pred = (step % 2) == 0
    loss = F.cross_entropy(model(idx, pred).view(-1, V), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    del loss, pred
report("train_fp32_heavy_then_light")

model.eval()
with torch.no_grad():
    for flag in (True, False):
        logits = model(idx, torch.tensor(flag, device="cuda"))
        del logits
report("eval_no_grad_both_branches")

model.train()
for _ in range(2):
    pred = (step % 2) == 0
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(idx, pred).view(-1, V).float(), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    step += 1
    del loss, pred
report("train_bf16_autocast_cond")
