"""RLOO (REINFORCE with leave-one-out baselines) written by hand with a hand-written sampling loop: a
Qwen2 policy from its config (hidden 768, 6 layers, 12 heads with 4 KV heads, vocab 32,000,
attention_dropout 0.1 so that train mode runs SDPA with dropout, sdpa) in fp32 weights under bf16
autocast, fused AdamW; a reward model `Qwen2ForSequenceClassification` (512 wide, 3 layers, num_labels 1,
bf16, pad_token_id 0). Rollouts in eval mode by a manual decode loop: a prefill of 8 prompts of 64 ids
repeated K=4 times, then 80 steps each feeding the last sampled token with a `DynamicCache`
(`past_key_values`, `use_cache=True`), temperature 0.7, nucleus filtering by `sort`, `cumsum` and
`scatter` (top_p 0.9), `torch.multinomial`. Then the reward model scores the 32 sequences, the
leave-one-out baseline per prompt gives the advantages, and in train mode (dropout on) the policy's
summed log-probabilities of the sampled tokens (log_softmax in fp32, `gather`) weight a REINFORCE
loss; 3 steps, the cache freed each time. Then an evaluation rollout of 16 prompts x 2 samples by the
same loop under `torch.inference_mode()`.

Sampled ids depend on values; shapes do not (80 steps always). 4 phases."""

import torch
from transformers import DynamicCache, Qwen2Config, Qwen2ForCausalLM, Qwen2ForSequenceClassification

torch.manual_seed(2535)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, P, N, K, NEW, TEMP, TOP_P = 32000, 64, 8, 4, 80, 0.7, 0.9
config = Qwen2Config(
    vocab_size=V,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=6,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=1024,
    attention_dropout=0.1,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
config._attn_implementation = "sdpa"
policy = Qwen2ForCausalLM(config).cuda()
rm_config = Qwen2Config(
    vocab_size=V,
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=8,
    num_labels=1,
    pad_token_id=0,
)
rm_config._attn_implementation = "sdpa"
reward_model = Qwen2ForSequenceClassification(rm_config).to("cuda", torch.bfloat16).eval()
opt = torch.optim.AdamW(policy.parameters(), lr=1e-6, fused=True)
report("load_policy_and_reward_model")


def sample(prompts):
    policy.eval()
    cache = DynamicCache()
    seq = prompts
    inp = prompts
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(NEW):
            out = policy(input_ids=inp, past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1].float() / TEMP
            sorted_logits, order = logits.sort(-1, descending=True)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) > TOP_P
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
            nxt = torch.multinomial(logits.softmax(-1), 1)
            seq = torch.cat([seq, nxt], 1)
            inp = nxt
    del cache, out
    return seq


gen = torch.Generator(device="cuda").manual_seed(2535)
for step in range(3):
    prompts = torch.randint(3, V, (N, P), device="cuda", generator=gen).repeat_interleave(K, 0)
    with torch.no_grad():
        seqs = sample(prompts)
        score = reward_model(input_ids=seqs).logits.squeeze(-1).float().view(N, K)
        baseline = (score.sum(1, keepdim=True) - score) / (K - 1)
        adv = (score - baseline).view(-1)
    policy.train()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = policy(input_ids=seqs, use_cache=False).logits[:, P - 1 : -1]
    logp = logits.float().log_softmax(-1).gather(-1, seqs[:, P:].unsqueeze(-1)).squeeze(-1).sum(-1)
    loss = -(adv * logp).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del prompts, seqs, score, baseline, adv, logits, logp, loss
report("rloo_x3")

torch.cuda.empty_cache()
report("after_empty_cache")

with torch.inference_mode():
    prompts = torch.randint(3, V, (16, P), device="cuda", generator=gen).repeat_interleave(2, 0)
    seqs = sample(prompts)
    score = reward_model(input_ids=seqs).logits.float().mean()
del prompts, seqs, score
report("eval_rollout_inference_mode")
