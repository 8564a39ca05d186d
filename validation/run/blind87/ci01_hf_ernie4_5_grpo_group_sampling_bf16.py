"""GRPO-style RL fine-tuning of an HF Ernie4_5ForCausalLM (GQA, tied embeddings) built from its config,
6 layers, 1,024 wide, a 103,424 vocabulary, bf16 weights: per step 4 prompts of 128 tokens each get 4
sampled 64-token completions (`generate(do_sample=True, num_return_sequences=4)` under
`torch.no_grad`), group-normalised rewards, token log-probs of the old policy under no_grad, then the
clipped-ratio loss over completion tokens with a frozen reference model's KL term, AdamW, 2 steps;
3 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Ernie4_5Config, Ernie4_5ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8701)
if SMALL:
    config = Ernie4_5Config(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
    )
    P, L, G, NEW = 2, 8, 2, 4
else:
    config = Ernie4_5Config(
        vocab_size=103424,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
    )
    P, L, G, NEW = 4, 128, 4, 64
device = "cuda" if torch.cuda.is_available() else "cpu"
policy = Ernie4_5ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
reference = Ernie4_5ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
reference.load_state_dict(policy.state_dict())
reference.requires_grad_(False)
reference.eval()
optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5, weight_decay=0.0)


def token_logps(model, seq, n_new):
    logits = model(input_ids=seq).logits[:, -n_new - 1 : -1].float()
    return torch.gather(F.log_softmax(logits, dim=-1), 2, seq[:, -n_new:, None]).squeeze(2)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    prompts = torch.randint(3, config.vocab_size, (P, L), device=device)
    policy.eval()
    with torch.no_grad():
        seq = policy.generate(
            prompts,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=True,
            top_k=0,
            num_return_sequences=G,
            pad_token_id=0,
        )
        old = token_logps(policy, seq, NEW)
        ref = token_logps(reference, seq, NEW)
    rewards = (seq[:, -NEW:] % 7 == 0).float().mean(1).view(P, G)
    adv = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).view(-1, 1)
    policy.train()
    new = token_logps(policy, seq, NEW)
    ratio = torch.exp(new - old)
    pg = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv)
    kl = torch.exp(ref - new) - (ref - new) - 1
    loss = (pg + 0.04 * kl).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del prompts, seq, old, ref, rewards, adv, new, ratio, pg, kl, loss
