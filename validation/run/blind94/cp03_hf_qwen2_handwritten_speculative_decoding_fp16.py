"""Hand-written greedy speculative decoding with HF transformers Qwen2: a 20-layer, 1,536-wide target
(12 heads, 2 KV heads, a 64,000 vocabulary) and a 4-layer, 512-wide draft sharing its vocabulary,
both fp16 from configs; each round the draft proposes 5 tokens one by one from its DynamicCache,
the target scores them in one forward over its own DynamicCache, the longest agreeing prefix plus
the target's next token is kept and both caches are cropped back (DynamicCache.crop); a batch-1
prompt of 1,024 tokens to 160 new tokens, then a prompt of 3,072 to 96; 3 phases."""

import os

import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9403)
if SMALL:
    common = dict(vocab_size=128, max_position_embeddings=512)
    target_cfg = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        **common,
    )
    draft_cfg = Qwen2Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        **common,
    )
    RUNS, K = ((24, 12), (40, 9)), 3
else:
    common = dict(vocab_size=64000, max_position_embeddings=4096)
    target_cfg = Qwen2Config(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=20,
        num_attention_heads=12,
        num_key_value_heads=2,
        **common,
    )
    draft_cfg = Qwen2Config(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        **common,
    )
    RUNS, K = ((1024, 160), (3072, 96)), 5
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
target = Qwen2ForCausalLM(target_cfg).to(device=device, dtype=dtype).eval()
draft = Qwen2ForCausalLM(draft_cfg).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


@torch.no_grad()
def speculative(prompt, new_tokens):
    t_cache, d_cache = DynamicCache(), DynamicCache()
    t_logits = target(input_ids=prompt, past_key_values=t_cache, use_cache=True).logits[:, -1:]
    draft(input_ids=prompt[:, :-1], past_key_values=d_cache, use_cache=True)
    seq = torch.cat([prompt, t_logits.argmax(-1)], dim=1)
    rounds = accepted = 0
    while seq.shape[1] - prompt.shape[1] < new_tokens:
        start = seq.shape[1]
        # draft: feed what it has not seen yet, then propose K tokens greedily
        d_in = seq[:, d_cache.get_seq_length() :]
        proposal = []
        for _ in range(K):
            d_logits = draft(input_ids=d_in, past_key_values=d_cache, use_cache=True).logits[:, -1:]
            d_in = d_logits.argmax(-1)
            proposal.append(d_in)
        proposal = torch.cat(proposal, dim=1)
        # target: verify the last kept token plus the K proposals in one forward
        t_in = torch.cat([seq[:, -1:], proposal], dim=1)
        t_logits = target(input_ids=t_in, past_key_values=t_cache, use_cache=True).logits
        t_choice = t_logits.argmax(-1)
        agree = (t_choice[:, :K] == proposal).int().cumprod(dim=1).sum().item()
        seq = torch.cat([seq, proposal[:, :agree], t_choice[:, agree : agree + 1]], dim=1)
        # both caches keep only what the kept sequence holds before its last token
        for cache in (t_cache, d_cache):
            extra = cache.get_seq_length() - (seq.shape[1] - 1)
            if extra > 0:
                cache.crop(-extra)
        rounds += 1
        accepted += seq.shape[1] - start
        del t_logits, t_choice, proposal, d_logits, t_in
    del t_cache, d_cache
    return seq, rounds, accepted


for L, NEW in RUNS:
    prompt = torch.randint(0, target_cfg.vocab_size, (1, L), device=device)
    seq, rounds, accepted = speculative(prompt, NEW)
    if device == "cuda":
        print(
            f"prompt {L} out {tuple(seq.shape)} rounds {rounds} kept {accepted}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del prompt, seq
