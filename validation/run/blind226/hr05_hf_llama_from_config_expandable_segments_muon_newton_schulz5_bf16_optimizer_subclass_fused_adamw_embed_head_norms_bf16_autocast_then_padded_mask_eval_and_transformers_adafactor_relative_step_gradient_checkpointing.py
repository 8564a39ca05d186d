"""Muon (Jordan et al. 2024) written by hand as a torch.optim.Optimizer subclass over a LlamaForCausalLM
built from LlamaConfig (12 layers of 1024, 16 heads with 4 key/value heads, SwiGLU 2816, vocabulary
32,000, SDPA attention), with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True set before torch is imported.

Muon takes every 2-D weight inside the decoder layers: Nesterov momentum in fp32 in self.state, the
update orthogonalized by 5 quintic Newton-Schulz iterations in bfloat16 (X / ||X||, transposed when tall,
a = 3.4445, b = -4.7750, c = 2.0315), scaled by sqrt(max(1, rows / cols)). The embeddings, lm_head and
RMSNorm weights go to a fused AdamW. Phases: 6 steps under bf16 autocast at batch 8 x 1024;
no_grad evaluation of the loss at batch 16 x 1024 with right padding (an attention_mask with 0s, so SDPA
gets a mask) and labels -100 on the pad; both optimizers deleted, empty_cache(), transformers'
Adafactor (scale_parameter, relative_step, warmup_init, lr None) over all parameters with
gradient_checkpointing_enable() at batch 16 x 1024, 4 steps. 3 phases."""

import os

os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402
from torch.optim import Optimizer  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.optimization import Adafactor  # noqa: E402

torch.manual_seed(2265)
device = "cuda"
V, S = 32000, 1024


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def newton_schulz5(g, steps=5, eps=1e-7):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.bfloat16()
    tall = g.size(0) > g.size(1)
    if tall:
        x = x.T
    x = x / (x.norm() + eps)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    if tall:
        x = x.T
    return x


class Muon(Optimizer):
    def __init__(self, params, lr=0.02, momentum=0.95, nesterov=True, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                st = self.state[p]
                if "momentum_buffer" not in st:
                    st["momentum_buffer"] = torch.zeros_like(g)
                buf = st["momentum_buffer"]
                buf.lerp_(g, 1 - group["momentum"])
                g = g.lerp(buf, group["momentum"]) if group["nesterov"] else buf
                u = newton_schulz5(g)
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(u.to(p.dtype), alpha=-group["lr"] * max(1.0, p.size(0) / p.size(1)) ** 0.5)


config = LlamaConfig(vocab_size=V, hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,
                     num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=S,
                     tie_word_embeddings=False)
model = LlamaForCausalLM(config).to(device)
muon_params = [p for n, p in model.model.layers.named_parameters() if p.dim() == 2]
adam_params = [p for p in model.parameters() if all(p is not q for q in muon_params)]
muon = Muon(muon_params, lr=0.02, weight_decay=0.01)
adamw = torch.optim.AdamW(adam_params, lr=3e-4, betas=(0.9, 0.95), weight_decay=0.0, fused=True)
print(f"muon {sum(p.numel() for p in muon_params)} adamw {sum(p.numel() for p in adam_params)}")

model.train()
for step in range(6):
    ids = torch.randint(0, V, (8, S), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    muon.step()
    adamw.step()
    model.zero_grad(set_to_none=True)
    print(f"muon step {step} loss {loss.item():.4f}")
report("muon train")

model.eval()
lengths = torch.randint(S // 2, S + 1, (16,), device=device)
mask = (torch.arange(S, device=device)[None, :] < lengths[:, None]).long()
ids = torch.randint(0, V, (16, S), device=device) * mask
labels = ids.masked_fill(mask == 0, -100)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    ev = model(input_ids=ids, attention_mask=mask, labels=labels).loss
print(f"eval loss {ev.item():.4f}")
del ids, labels, mask
report("padded eval")

del muon, adamw
torch.cuda.empty_cache()
model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = Adafactor(model.parameters(), scale_parameter=True, relative_step=True, warmup_init=True, lr=None)
for step in range(4):
    ids = torch.randint(0, V, (16, S), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"adafactor step {step} loss {loss.item():.4f}")
report("adafactor checkpointed")
