"""GaLore (Zhao et al. 2024) and AdEMAMix (Pagliardini et al. 2024) written by hand over a GPT built from
nn.TransformerEncoderLayer (8 layers of 1024, 16 heads, FFN 4096 GELU, norm_first, batch_first, no
dropout) with a bfloat16 causal mask from nn.Transformer.generate_square_subsequent_mask, a
vocabulary of 32,768, context 1024 and an untied head.

GaLore-AdamW: the model is pure bfloat16 (model.bfloat16()); every 2-D weight of the encoder layers has its
gradient projected to rank 128 by the singular vectors of torch.linalg.svd(grad.float(),
full_matrices=False), refreshed every 4 steps (right vectors when rows >= cols, else left), Adam moments in
fp32 of the low-rank shape, the update projected back and scaled by 0.25, applied to the bf16 weights with
decoupled weight decay; other parameters get plain Adam with fp32 moments. Phases: 8 GaLore steps at
batch 16 x 1024; inference_mode evaluation at batch 32 x 1024 in eval mode (TransformerEncoder's fast
path); the model cast back with model.float(), GaLore's state dropped, AdEMAMix (fast and slow EMAs, alpha
and beta3 warmed up linearly) with torch._foreach ops under bf16 autocast and clip_grad_norm_(foreach=True),
4 steps at batch 8 x 1024. 3 phases."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim import Optimizer

torch.manual_seed(2266)
device = "cuda"
V, D, L, S = 32768, 1024, 8, 1024


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(S, D)
        layer = nn.TransformerEncoderLayer(D, 16, 4 * D, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.enc = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device, dtype=x.dtype)
        x = self.enc(x, mask=mask, is_causal=True)
        return self.head(self.ln(x))


class GaLoreAdamW(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, rank=None,
                                      update_proj_gap=4, scale=0.25))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                st["step"] = st.get("step", 0) + 1
                g = p.grad.float()
                rank = group["rank"]
                if rank is not None:
                    right = g.shape[0] >= g.shape[1]
                    if (st["step"] - 1) % group["update_proj_gap"] == 0:
                        U, s, Vh = torch.linalg.svd(g, full_matrices=False)
                        st["ortho"] = Vh[:rank].clone() if right else U[:, :rank].clone()
                        del U, s, Vh
                    g = g @ st["ortho"].T if right else st["ortho"].T @ g
                if "exp_avg" not in st:
                    st["exp_avg"] = torch.zeros_like(g)
                    st["exp_avg_sq"] = torch.zeros_like(g)
                m, v = st["exp_avg"], st["exp_avg_sq"]
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                step_size = group["lr"] * math.sqrt(1 - b2 ** st["step"]) / (1 - b1 ** st["step"])
                u = m / (v.sqrt() + group["eps"])
                if rank is not None:
                    u = (u @ st["ortho"] if right else st["ortho"] @ u) * group["scale"]
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(u.to(p.dtype), alpha=-step_size)


class AdEMAMix(Optimizer):
    def __init__(self, params, lr=2e-4, betas=(0.9, 0.999, 0.9999), alpha=5.0, warmup=4, eps=1e-8,
                 weight_decay=0.1):
        super().__init__(params, dict(lr=lr, betas=betas, alpha=alpha, warmup=warmup, eps=eps,
                                      weight_decay=weight_decay, k=0))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2, b3_final = group["betas"]
            group["k"] += 1
            k = group["k"]
            frac = min(1.0, k / group["warmup"])
            alpha = group["alpha"] * frac
            lb1, lb3 = math.log(b1), math.log(b3_final)
            b3 = min(math.exp(lb1 * lb3 / ((1 - frac) * lb3 + frac * lb1)), b3_final)
            ps = [p for p in group["params"] if p.grad is not None]
            for p in ps:
                st = self.state[p]
                if not st:
                    st["m1"], st["m2"], st["nu"] = (torch.zeros_like(p) for _ in range(3))
            gs = [p.grad for p in ps]
            m1 = [self.state[p]["m1"] for p in ps]
            m2 = [self.state[p]["m2"] for p in ps]
            nu = [self.state[p]["nu"] for p in ps]
            torch._foreach_lerp_(m1, gs, 1 - b1)
            torch._foreach_lerp_(m2, gs, 1 - b3)
            torch._foreach_mul_(nu, b2)
            torch._foreach_addcmul_(nu, gs, gs, value=1 - b2)
            den = torch._foreach_div(nu, 1 - b2**k)
            torch._foreach_sqrt_(den)
            torch._foreach_add_(den, group["eps"])
            num = torch._foreach_div(m1, 1 - b1**k)
            torch._foreach_add_(num, m2, alpha=alpha)
            torch._foreach_div_(num, den)
            torch._foreach_add_(num, ps, alpha=group["weight_decay"])
            torch._foreach_add_(ps, num, alpha=-group["lr"])


model = GPT().to(device).bfloat16()
low_rank = [p for p in model.enc.parameters() if p.dim() == 2]
rest = [p for p in model.parameters() if all(p is not q for q in low_rank)]
opt = GaLoreAdamW([{"params": low_rank, "rank": 128, "weight_decay": 0.01}, {"params": rest}])
report("after model")

model.train()
for step in range(8):
    ids = torch.randint(0, V, (16, S), device=device)
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"galore step {step} loss {loss.item():.4f} mem {torch.cuda.memory_allocated()}")
report("galore bf16 train")

model.eval()
with torch.inference_mode():
    ids = torch.randint(0, V, (32, S), device=device)
    logits = model(ids)
    nll = F.cross_entropy(logits[:, :-1].float().reshape(-1, V), ids[:, 1:].reshape(-1))
print(f"eval nll {nll.item():.4f}")
del ids, logits
report("eval")

del opt
model.float()
model.train()
opt = AdEMAMix(model.parameters())
for step in range(4):
    ids = torch.randint(0, V, (8, S), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(ids[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"ademamix step {step} loss {loss.item():.4f} gnorm {gn.item():.3f}")
report("ademamix fp32 autocast")
