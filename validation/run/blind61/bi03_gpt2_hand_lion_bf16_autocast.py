"""HF GPT2LMHeadModel from a GPT2Config (GPT-2 small) trained under bf16 autocast by a Lion
optimizer written by hand as a torch.optim.Optimizer subclass (sign of the interpolated momentum,
decoupled weight decay, per-parameter ops: `lerp`, `sign_`, `add_`), global-norm clipping by
clip_grad_norm_; batch 8 of 1,024 tokens, fp32 weights, 3 steps; 4 phases."""

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(6103)


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.1):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.lerp(p.grad, 1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                exp_avg.lerp_(p.grad, 1 - beta2)


if SMALL:
    config = GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    B, L = 2, 16
else:
    config = GPT2Config()
    B, L = 8, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = GPT2LMHeadModel(config).to(device)
optimizer = Lion(model.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
