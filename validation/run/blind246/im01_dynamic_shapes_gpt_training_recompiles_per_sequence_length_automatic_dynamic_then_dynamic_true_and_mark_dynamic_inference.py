"""Dynamic shapes under torch.compile: a 4-layer GPT (d 1024, 16 heads through SDPA, vocab 32000, fp32
weights, AdamW foreach) compiled with the default settings and trained at sequence lengths 256, then 384
(dynamo recompiles with the sequence length marked dynamic: automatic dynamic after a second shape),
then 512 and 320 (the dynamic graph serves them, no recompile). Then evaluation under no_grad with a
second compile of the same model, `dynamic=True`, at batch 4 x 200 and 16 x 300; then a third compile
whose input's sequence dimension is `torch._dynamo.mark_dynamic`, at 8 x 448.

Sizes are fixed by the program (no value-dependent sizes). 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2461)
V, D, H, L = 32000, 1024, 16, 4


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

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, H, D // H).permute(2, 0, 3, 1, 4)
        x = x + self.o(
            F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
        )
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        x = self.emb(idx)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x))


model = GPT().cuda()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
compiled = torch.compile(model)
report("setup")


def train_step(b, t):
    idx = torch.randint(0, V, (b, t), device="cuda")
    tgt = torch.randint(0, V, (b, t), device="cuda")
    loss = F.cross_entropy(compiled(idx).view(-1, V), tgt.view(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


train_step(8, 256)
report("train_seq256_static_compile")

train_step(8, 384)
report("train_seq384_recompile_automatic_dynamic")

train_step(8, 512)
train_step(8, 320)
report("train_seq512_and_320_dynamic_graph_reused")

model.eval()
dyn = torch.compile(model, dynamic=True)
with torch.no_grad():
    for b, t in ((4, 200), (16, 300)):
        logits = dyn(torch.randint(0, V, (b, t), device="cuda"))
        del logits
report("eval_dynamic_true_two_shapes")

marked = torch.compile(model)
x = torch.randint(0, V, (8, 448), device="cuda")
torch._dynamo.mark_dynamic(x, 1)
with torch.no_grad():
    logits = marked(x)
report("eval_mark_dynamic_seq448")
