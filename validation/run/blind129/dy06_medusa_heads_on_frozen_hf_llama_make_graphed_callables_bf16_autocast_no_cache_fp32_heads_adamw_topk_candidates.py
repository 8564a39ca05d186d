"""Medusa heads trained on a frozen HF Llama from LlamaConfig (16 layers, 2,048 wide, 16 heads with 8
KV heads, SwiGLU of 5,632, vocabulary 32,000, bf16 weights): its last hidden states (no_grad, batch 8 x
1,024) feed 4 fp32 Medusa heads (a residual SiLU block and a vocabulary projection initialised from the
base's lm_head), head k predicting the token k + 2 ahead with the loss weighted 0.8^k. The heads and
their loss are one module graphed with torch.cuda.make_graphed_callables under bf16 autocast with
cache_enabled=False (3 warm-up iterations on a side stream, forward and backward graphs captured), fused
AdamW stepped eagerly; 6 steps; then under inference_mode the heads propose their top-4 candidates for
the last positions of 16 prompts of 512 tokens and the base checks the first head's top-1 on a
candidate continuation; 5 phases."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(12906)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    B, T, EB, ET = 2, 32, 2, 16
else:
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
    )
    B, T, EB, ET = 8, 1024, 16, 512
NHEADS, D, V = 4, cfg.hidden_size, cfg.vocab_size
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
base = LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval().requires_grad_(False)


class MedusaHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(D, D)
        nn.init.zeros_(self.block.weight)
        self.out = nn.Linear(D, V, bias=False)
        self.out.weight.data.copy_(base.lm_head.weight.float())

    def forward(self, h):
        h = h + F.silu(self.block(h))
        return self.out(h)


class MedusaLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList(MedusaHead() for _ in range(NHEADS))

    def forward(self, hidden, ids):
        total = hidden.new_zeros((), dtype=torch.float32)
        for k, head in enumerate(self.heads):
            shift = k + 2
            logits = head(hidden[:, :-shift])
            loss = F.cross_entropy(logits.float().reshape(-1, V), ids[:, shift:].reshape(-1))
            total = total + 0.8**k * loss
        return total


medusa = MedusaLoss().to(device)
optimizer = torch.optim.AdamW(medusa.parameters(), lr=1e-3, weight_decay=0.0, fused=device == "cuda")


def report(name):
    if device == "cuda":
        print(
            f"{name} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"smoke {name}")


def batch():
    ids = torch.randint(0, V, (B, T), device=device)
    with torch.no_grad():
        hidden = base.model(input_ids=ids).last_hidden_state
    return hidden, ids


report("base and heads")
amp = torch.autocast(device, dtype=torch.bfloat16, cache_enabled=False)
with amp:
    hidden, ids = batch()
    if device == "cuda":
        graphed = torch.cuda.make_graphed_callables(medusa, (hidden, ids))
    else:
        graphed = medusa
report("graphed")
for step in range(6):
    hidden, ids = batch()
    with amp:
        loss = graphed(hidden, ids)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if step in (0, 5):
        print(f"step {step} loss {loss.item():.3f}")
        report(f"step {step}")
    del hidden, ids, loss

with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    prompts = torch.randint(0, V, (EB, ET), device=device)
    last = base.model(input_ids=prompts).last_hidden_state[:, -1:]
    candidates = torch.stack([head(last).topk(4, dim=-1).indices for head in medusa.heads], dim=1)
    guess = candidates[:, 0, 0, :1]
    check = base(input_ids=torch.cat([prompts, guess], dim=1), logits_to_keep=1).logits.argmax(-1)
    agree = (check == guess).float().mean()
    print(f"candidates {tuple(candidates.shape)} first-head agreement {agree.item():.3f}")
report("candidates")
