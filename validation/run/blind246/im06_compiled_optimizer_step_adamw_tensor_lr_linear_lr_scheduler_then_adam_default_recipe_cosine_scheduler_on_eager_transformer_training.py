"""A compiled optimizer step (PyTorch's recipe, "Running the compiled optimizer with an LR scheduler"):
the model trains eagerly and only the step is compiled, `@torch.compile(fullgraph=False)` around
`opt.step(); sched.step()`, with the learning rate a tensor so that the scheduler's changes do not
recompile. The model: a 4-layer pre-norm transformer encoder (d 1024, 16 heads through SDPA, MLP 4096,
fp32 weights), batch 8 x 512, a mean-squared loss on its output. First AdamW (`foreach=True,
capturable=True`, weight decay 0.01, lr tensor 1e-3) with a LinearLR scheduler for four steps (the
first step compiles; dynamo runs the optimizer's `_init_group` and makes the states on the GPU);
then a fresh Adam exactly as the recipe writes it (lr tensor 0.01, no foreach given) with a
CosineAnnealingLR scheduler over 5 steps for three steps; then evaluation under no_grad.

No value-dependent sizes. 4 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(2466)
D, H, L, T, B = 1024, 16, 4, 512, 8


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
        return x + self.fc2(F.gelu(self.fc1(self.n2(x))))


model = nn.Sequential(*(Block() for _ in range(L))).cuda()
report("setup")


def train(opt_step, steps):
    for _ in range(steps):
        x = torch.randn(B, T, D, device="cuda")
        loss = F.mse_loss(model(x), x)
        loss.backward()
        opt_step()
        model.zero_grad(set_to_none=True)
        del loss


opt = torch.optim.AdamW(
    model.parameters(), lr=torch.tensor(1e-3), weight_decay=0.01, foreach=True, capturable=True
)
sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=4)


@torch.compile(fullgraph=False)
def adamw_step():
    opt.step()
    sched.step()


train(adamw_step, 4)
report("adamw_foreach_compiled_step_linear_lr_four_steps")

opt = sched = adamw_step = None  # the AdamW states die with the optimizer
opt2 = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.01))
sched2 = torch.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=5)


@torch.compile(fullgraph=False)
def adam_step():
    opt2.step()
    sched2.step()


train(adam_step, 3)
report("adam_recipe_compiled_step_cosine_three_steps")

with torch.no_grad():
    y = model(torch.randn(2 * B, T, D, device="cuda"))
    del y
report("eval_no_grad")
