"""Pure-bf16 training of a Hugging Face VaultGemma (VaultGemmaConfig: 1,024 wide, 8 layers of
alternating sliding and full attention, 8 heads of 128 over 4 key-value heads, MLP of 4,096,
256,000-token tied vocabulary, logit softcaps; weights and gradients bf16) with an optimizer written
by hand the way low-memory recipes do: Adafactor's factored second moment (row and column means of
g^2 + 1e-30 kept in fp32 for the matrices, a full one for vectors, beta2 = 1 - t^-0.8, update
clipped to RMS 1), a first moment kept as int8 in blocks of 256 with an fp32 absmax per block
(dequantised, updated, requantised each step), decoupled weight decay, and the new bf16 weights
written by stochastic rounding (the fp32 result viewed as int32, 16-bit noise from `randint_like`
added, the low half masked off); 3 steps of 8 x 1,024 tokens, then greedy generation of 32 tokens
for 4 prompts of 64 under inference_mode; 5 phases."""

import os

import torch
from transformers import VaultGemmaConfig, VaultGemmaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13206)
B, T, LAYERS = (2, 64, 2) if SMALL else (8, 1024, 8)
cfg = VaultGemmaConfig(
    vocab_size=256000 if not SMALL else 2048,
    hidden_size=1024 if not SMALL else 128,
    intermediate_size=4096 if not SMALL else 512,
    num_hidden_layers=LAYERS,
    num_attention_heads=8 if not SMALL else 2,
    num_key_value_heads=4 if not SMALL else 1,
    head_dim=128 if not SMALL else 64,
    sliding_window=512 if not SMALL else 32,
    layer_types=["sliding_attention", "full_attention"] * (LAYERS // 2),
    max_position_embeddings=4096,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
BLOCK = 256


def quantize(m):
    flat = m.flatten()
    pad = (-flat.numel()) % BLOCK
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    blocks = flat.view(-1, BLOCK)
    absmax = blocks.abs().amax(-1, keepdim=True).clamp_(min=1e-12)
    return (blocks / absmax * 127).round_().to(torch.int8), absmax


def dequantize(q, absmax, like):
    return (q.float() * (absmax / 127)).flatten()[: like.numel()].view_as(like)


def stochastic_round_(p, x):
    bits = x.view(torch.int32)
    noise = torch.randint_like(bits, 0, 1 << 16)
    p.copy_(((bits + noise) & -65536).view(torch.float32))


class Adafactor8bit(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-3, beta1=0.9, decay_rate=-0.8, eps=1e-30, clip=1.0, weight_decay=0.01):
        super().__init__(
            params,
            dict(lr=lr, beta1=beta1, decay_rate=decay_rate, eps=eps, clip=clip, weight_decay=weight_decay),
        )

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.float()
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    if p.ndim >= 2:
                        state["row"] = torch.zeros(p.shape[:-1], device=p.device)
                        state["col"] = torch.zeros(p.shape[:-2] + p.shape[-1:], device=p.device)
                    else:
                        state["v"] = torch.zeros_like(g)
                    state["m_q"], state["m_absmax"] = quantize(torch.zeros_like(g))
                state["step"] += 1
                beta2t = 1.0 - state["step"] ** group["decay_rate"]
                upd = g.square().add_(group["eps"])
                if p.ndim >= 2:
                    state["row"].lerp_(upd.mean(-1), 1 - beta2t)
                    state["col"].lerp_(upd.mean(-2), 1 - beta2t)
                    r = (state["row"] / state["row"].mean(-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    c = state["col"].unsqueeze(-2).rsqrt()
                    u = torch.mul(r, c).mul_(g)
                else:
                    state["v"].lerp_(upd, 1 - beta2t)
                    u = state["v"].rsqrt().mul_(g)
                del upd
                u.div_((u.square().mean().sqrt() / group["clip"]).clamp_(min=1.0))
                m = dequantize(state["m_q"], state["m_absmax"], g)
                m.mul_(group["beta1"]).add_(u, alpha=1 - group["beta1"])
                state["m_q"], state["m_absmax"] = quantize(m)
                new = p.float()
                new.mul_(1 - group["lr"] * group["weight_decay"]).sub_(m, alpha=group["lr"])
                stochastic_round_(p, new)


model = VaultGemmaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.train()
opt = Adafactor8bit(model.parameters(), lr=1e-3)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for step in range(3):
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        q = sum(s["m_q"].numel() for s in opt.state.values())
        print(
            f"step {step} loss {loss.item():.4f} int8 moments {q}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

model.eval()
with torch.inference_mode():
    prompts = torch.randint(0, cfg.vocab_size, (4, 64), device=device)
    out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32, do_sample=False)
if device == "cuda":
    print(
        f"generate {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
