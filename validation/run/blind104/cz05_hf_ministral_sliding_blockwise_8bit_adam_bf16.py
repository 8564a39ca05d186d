"""HF transformers Ministral (Mistral with per-layer sliding or full attention) built from a config
at 8 layers alternating sliding-window (512) and full attention, 1,024 wide, 16 heads / 4 KV heads
of 64, vocabulary 131,072 (untied), in bf16, trained with a hand-written blockwise 8-bit Adam (as in
bitsandbytes: both moments stored as int8/uint8 codes with one fp32 absmax per block of 2,048
values; each step dequantises a parameter's moments to fp32, updates them and the parameter, then
quantises them again); batch 4 x 1,024 tokens, 4 steps; then a no_grad perplexity on 8 x 1,024;
6 phases."""

import math
import os

import torch
import torch.nn.functional as F
from transformers import MinistralConfig, MinistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10405)
if SMALL:
    cfg = MinistralConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
    )
    B, S = 2, 32
else:
    cfg = MinistralConfig(
        vocab_size=131072,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        sliding_window=512,
        max_position_embeddings=4096,
        layer_types=["sliding_attention", "full_attention"] * 4,
    )
    B, S = 4, 1024
BLOCK = 2048
device = "cuda" if torch.cuda.is_available() else "cpu"


class Adam8bit(torch.optim.Optimizer):
    def __init__(self, params, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @staticmethod
    def _blocks(t):
        flat = t.reshape(-1)
        pad = (-flat.numel()) % BLOCK
        return F.pad(flat, (0, pad)).view(-1, BLOCK)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                nblocks = math.ceil(p.numel() / BLOCK)
                if not st:
                    st["step"] = 0
                    st["m"] = torch.zeros(nblocks, BLOCK, dtype=torch.int8, device=p.device)
                    st["m_absmax"] = torch.zeros(nblocks, 1, device=p.device)
                    st["v"] = torch.zeros(nblocks, BLOCK, dtype=torch.uint8, device=p.device)
                    st["v_absmax"] = torch.zeros(nblocks, 1, device=p.device)
                st["step"] += 1
                t = st["step"]
                g = self._blocks(p.grad.float())
                m = st["m"].float() * (st["m_absmax"] / 127)
                v = st["v"].float() * (st["v_absmax"] / 255)
                m.mul_(b1).add_(g, alpha=1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                upd = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt_().add_(group["eps"]))
                upd = upd.view(-1)[: p.numel()].view_as(p)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(upd.to(p.dtype), alpha=-group["lr"])
                st["m_absmax"] = m.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12)
                st["v_absmax"] = v.amax(dim=1, keepdim=True).clamp_(min=1e-12)
                st["m"] = (m / st["m_absmax"] * 127).round_().to(torch.int8)
                st["v"] = (v / st["v_absmax"] * 255).round_().to(torch.uint8)


model = MinistralForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
optimizer = Adam8bit(model.parameters())
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(4):
    ids = torch.randint(3, cfg.vocab_size, (B, S), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss
model.eval()
with torch.no_grad():
    ids = torch.randint(3, cfg.vocab_size, (2 * B, S), device=device)
    ppl = torch.exp(model(input_ids=ids, labels=ids).loss)
if device == "cuda":
    print(
        f"eval {ppl.item():.1f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
