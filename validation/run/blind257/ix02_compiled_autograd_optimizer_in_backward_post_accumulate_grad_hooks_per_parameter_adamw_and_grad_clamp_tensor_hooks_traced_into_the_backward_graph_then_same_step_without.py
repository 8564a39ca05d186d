"""Optimizer in backward under compiled autograd: PyTorch's recipe (one AdamW per parameter,
foreach=False, stepped and zeroed by a `register_post_accumulate_grad_hook` on each parameter, so a
gradient is freed as soon as its parameter is updated) on a 3-layer pre-norm transformer encoder
(width 1024, 16 heads through SDPA, MLP 4096 with ReLU, fp32) with a classification head, plus a
gradient clamp registered with `Tensor.register_hook` on the blocks' MLP weights. With
`torch._dynamo.config.compiled_autograd = True` and the backward inside a compiled step function, the
hooks become calls in the compiled autograd graph (`call_hook`: tensor pre-hooks before their
AccumulateGrad, post-accumulate-grad hooks after it, torch/_dynamo/compiled_autograd.py) and dynamo
traces the optimizers' steps into the backward graph. Batch 8 x 256. Two steps (the first makes each
AdamW's states inside the backward), two more; then the config flag off and a new compiled step
function (no compiled autograd: the eager engine runs the same hooks per node) for two steps; then an
evaluation under no_grad. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch._dynamo.config.compiled_autograd = True
torch.manual_seed(25702)
D, H, L, T, B, C = 1024, 16, 3, 256, 8, 1000


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
        x = x + self.o(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, D))
        return x + self.fc2(F.relu(self.fc1(self.n2(x))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.LayerNorm(D)
        self.cls = nn.Linear(D, C)

    def forward(self, x):
        x = self.inp(x)
        for blk in self.blocks:
            x = blk(x)
        return self.cls(self.norm(x).mean(1))


model = Encoder().cuda()
optimizers = {p: torch.optim.AdamW([p], lr=1e-4, foreach=False) for p in model.parameters()}


def optimizer_hook(p):
    optimizers[p].step()
    optimizers[p].zero_grad(set_to_none=True)


for p in model.parameters():
    p.register_post_accumulate_grad_hook(optimizer_hook)
for blk in model.blocks:
    for w in (blk.fc1.weight, blk.fc2.weight):
        w.register_hook(lambda g: g.clamp(-0.01, 0.01))


def step_fn(x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.detach()


train_step = torch.compile(step_fn)


def data():
    return torch.randn(B, T, 64, device="cuda"), torch.randint(0, C, (B,), device="cuda")


report("setup")

for _ in range(2):
    train_step(*data())
report("steps0_1_optimizer_states_made_in_backward")

for _ in range(2):
    train_step(*data())
report("steps2_3_cached")

torch._dynamo.config.compiled_autograd = False
plain_step = torch.compile(step_fn)
for _ in range(2):
    plain_step(*data())
report("two_steps_without_compiled_autograd")

model.eval()
with torch.no_grad():
    x, _ = data()
    out = model(x)
    del out
report("eval_no_grad")
