"""Direct preference optimization as TRL runs it: a policy and a frozen reference copy of an HF
LlamaForCausalLM (1024 wide, 8 layers, 16 heads with 4 KV heads) in bf16, chosen and rejected
completions concatenated into one batch of 2x4 at 1024 tokens, per-token log-probs by log_softmax
and gather over the completion mask, the reference's under no_grad, the sigmoid DPO loss (beta 0.1);
sdpa attention, AdamW (foreach), 2 steps; 3 phases."""

import copy
import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3301)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S, P = 2, 16, 6
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
    )
    B, S, P = 4, 1024, 384
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
policy = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
reference = copy.deepcopy(policy).eval().requires_grad_(False)
optimizer = torch.optim.AdamW(policy.parameters(), lr=5e-7)


def logps(model, ids, mask):
    logits = model(input_ids=ids).logits[:, :-1]
    lp = torch.gather(logits.log_softmax(-1), 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return (lp * mask[:, 1:]).sum(-1)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (2 * B, S), device=device)
    mask = torch.zeros(2 * B, S, device=device)
    mask[:, P:] = 1.0
    pol = logps(policy, ids, mask)
    with torch.no_grad():
        ref = logps(reference, ids, mask)
    margin = (pol[:B] - ref[:B]) - (pol[B:] - ref[B:])
    loss = -F.logsigmoid(0.1 * margin).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, mask, pol, ref, margin, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
