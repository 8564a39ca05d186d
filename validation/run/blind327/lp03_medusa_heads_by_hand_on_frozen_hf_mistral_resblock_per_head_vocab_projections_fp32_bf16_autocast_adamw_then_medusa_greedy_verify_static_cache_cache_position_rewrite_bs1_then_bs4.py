"""Medusa-1 by hand: four extra decoding heads (each a residual SiLU block plus its own 32k-vocab
projection, fp32, initialised from the base lm_head) on a frozen MistralForCausalLM from a small
MistralConfig (1024 wide, 8 layers, GQA 16/8, sliding window 1024, untied) in bf16. Training: the base
model's last hidden states under no_grad, head k predicting token t+k+2, the four cross-entropies weighted
0.8^k, bf16 autocast, AdamW, on 4 x 1,024 batches, 2 steps. Decoding: greedy Medusa with a StaticCache and
explicit cache_position: each iteration feeds the last accepted token plus the four head proposals (5
tokens) at positions cur..cur+4, the base model's argmax verifies them, the longest matching prefix is
accepted and the next iteration simply overwrites the rejected slots of the static cache (no crop), for a
fixed number of iterations; first batch 1, then a batch of 4 prompts advancing by the batch's shortest
accepted prefix.

Phases: 0 base model and heads built; 1 first head-training step; 2 second step; 3 Medusa decoding at batch 1;
4 Medusa decoding at batch 4."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import MistralConfig, MistralForCausalLM, StaticCache

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3273)
if SMALL:
    config = MistralConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=64,
    )
    B, S, PL, ITERS = 2, 48, 8, 4
else:
    config = MistralConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=3584,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        sliding_window=1024,
        max_position_embeddings=4096,
    )
    B, S, PL, ITERS = 4, 1024, 256, 32
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
NHEADS = 4


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class MedusaHead(nn.Module):
    def __init__(self, hidden, vocab, lm_head_weight):
        super().__init__()
        self.block = nn.Linear(hidden, hidden)
        nn.init.zeros_(self.block.weight)
        self.proj = nn.Linear(hidden, vocab, bias=False)
        self.proj.weight.data.copy_(lm_head_weight)

    def forward(self, h):
        return self.proj(h + F.silu(self.block(h)))


base = MistralForCausalLM(config).to(device=device, dtype=torch.bfloat16).eval().requires_grad_(False)
heads = nn.ModuleList(
    MedusaHead(config.hidden_size, config.vocab_size, base.lm_head.weight.float()) for _ in range(NHEADS)
).to(device)
opt = torch.optim.AdamW(heads.parameters(), lr=1e-3, weight_decay=0.0)
report("built")

for step in range(2):
    ids = torch.randint(3, config.vocab_size, (B, S), device=device)
    with torch.no_grad():
        hidden = base.model(input_ids=ids).last_hidden_state
    loss = 0.0
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        for k, head in enumerate(heads):
            logits = head(hidden[:, : S - k - 2])
            ce = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, k + 2 :].flatten())
            loss = loss + 0.8**k * ce
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"medusa step {step} loss {loss.item():.4f}")
    del hidden, logits, ce, loss
    report(f"medusa_train{step}")
del opt
heads.to(torch.bfloat16).eval()


@torch.no_grad()
def medusa_decode(prompts):
    nb = prompts.shape[0]
    cache = StaticCache(config=config, max_cache_len=PL + ITERS * (NHEADS + 1) + 1)
    hidden = base.model(
        input_ids=prompts,
        past_key_values=cache,
        cache_position=torch.arange(PL, device=device),
        use_cache=True,
    ).last_hidden_state
    h = hidden[:, -1]
    last = base.lm_head(h).argmax(-1)
    cur = PL
    accepted_total = torch.zeros(nb, dtype=torch.long, device=device)
    for _ in range(ITERS):
        proposals = torch.stack([head(h).argmax(-1) for head in heads], dim=1)
        cand = torch.cat([last[:, None], proposals], dim=1)
        cpos = torch.arange(cur, cur + NHEADS + 1, device=device)
        hidden = base.model(
            input_ids=cand, past_key_values=cache, cache_position=cpos, use_cache=True
        ).last_hidden_state
        pred = base.lm_head(hidden).argmax(-1)
        n_acc = (pred[:, :-1] == cand[:, 1:]).long().cumprod(dim=1).sum(1)
        step_acc = int(n_acc.min())
        last = pred[:, step_acc]
        h = hidden[:, step_acc]
        accepted_total += n_acc + 1
        cur += step_acc + 1
        del hidden, pred
    return accepted_total


prompt1 = torch.randint(3, config.vocab_size, (1, PL), device=device)
acc = medusa_decode(prompt1)
print("bs1 tokens", acc.tolist())
report("medusa_decode_bs1")
prompt4 = torch.randint(3, config.vocab_size, (4, PL), device=device)
acc = medusa_decode(prompt4)
print("bs4 tokens", acc.tolist())
report("medusa_decode_bs4")
