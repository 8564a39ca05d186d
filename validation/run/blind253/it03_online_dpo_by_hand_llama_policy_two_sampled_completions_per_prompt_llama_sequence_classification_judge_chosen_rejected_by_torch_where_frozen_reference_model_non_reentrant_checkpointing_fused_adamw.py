"""Online DPO written by hand (TRL's OnlineDPOTrainer in one process): a Llama policy from its config
(hidden 1,024, 6 layers, 16 heads with 4 KV heads, vocab 32,000, sdpa) in bfloat16, full fine-tuning
with fused AdamW; a frozen reference Llama of the same config (a second model loaded with the
policy's state dict); a reward model `LlamaForSequenceClassification` (512 wide, 4 layers, num_labels
1, bf16, pad_token_id 0). Each step: 6 prompts of 80 ids, 2 sampled completions each
(`num_return_sequences=2`, temperature 0.9, 112 new tokens with min_new_tokens equal, eos disabled)
from `generate()` in eval mode with the KV cache; the judge scores both; chosen and rejected picked per
prompt by `torch.where` on the scores (shapes fixed); `torch.cuda.empty_cache()`; then in train mode
with `gradient_checkpointing_enable(use_reentrant=False)`: the policy's and the reference's summed
log-probabilities of the completions over one batch of 12 (chosen then rejected), sigmoid DPO loss
(beta 0.1); 3 steps. `gradient_checkpointing_disable()` before each rollout. Then the implicit
reward accuracy over 16 held-out prompts' sampled pairs under no_grad.

Sampled ids depend on values; shapes do not. 4 phases."""

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification

torch.manual_seed(2533)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, P, N, NEW, BETA = 32000, 80, 6, 112, 0.1
config = LlamaConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=1024,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
config._attn_implementation = "sdpa"
policy = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
reference = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
reference.load_state_dict(policy.state_dict())
reference.eval().requires_grad_(False)
rm_config = LlamaConfig(
    vocab_size=V,
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=8,
    num_labels=1,
    pad_token_id=0,
)
rm_config._attn_implementation = "sdpa"
judge = LlamaForSequenceClassification(rm_config).to("cuda", torch.bfloat16).eval()
opt = torch.optim.AdamW(policy.parameters(), lr=5e-7, fused=True)
report("load_policy_reference_judge")


def sample_pairs(prompts):
    policy.eval()
    policy.gradient_checkpointing_disable()
    with torch.no_grad():
        seqs = policy.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            temperature=0.9,
            top_k=0,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            num_return_sequences=2,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
        )
        scores = judge(input_ids=seqs).logits.squeeze(-1).view(-1, 2)
        pair = seqs.view(-1, 2, seqs.shape[-1])
        first_wins = (scores[:, 0] >= scores[:, 1])[:, None]
        chosen = torch.where(first_wins, pair[:, 0], pair[:, 1])
        rejected = torch.where(first_wins, pair[:, 1], pair[:, 0])
    return torch.cat([chosen, rejected], 0)


def seq_logps(m, ids):
    logits = m(input_ids=ids, use_cache=False).logits[:, P - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1).sum(-1)


gen = torch.Generator(device="cuda").manual_seed(2533)
for step in range(3):
    prompts = torch.randint(3, V, (N, P), device="cuda", generator=gen)
    ids = sample_pairs(prompts)
    torch.cuda.empty_cache()
    policy.train()
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    with torch.no_grad():
        ref = seq_logps(reference, ids)
    pol = seq_logps(policy, ids)
    margin = (pol[:N] - ref[:N]) - (pol[N:] - ref[N:])
    loss = -F.logsigmoid(BETA * margin).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del ids, ref, pol, margin, loss
report("online_dpo_x3")

prompts = torch.randint(3, V, (16, P), device="cuda", generator=gen)
ids = sample_pairs(prompts)
report("eval_sampling_and_judge")

with torch.no_grad():
    acc = ((seq_logps(policy, ids) - seq_logps(reference, ids)).view(2, -1).diff(dim=0) < 0).float().mean()
del ids, acc
report("eval_implicit_reward")
