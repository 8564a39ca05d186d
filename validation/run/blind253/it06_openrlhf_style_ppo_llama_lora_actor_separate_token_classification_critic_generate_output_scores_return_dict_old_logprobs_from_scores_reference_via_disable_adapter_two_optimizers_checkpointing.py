"""PPO in the OpenRLHF layout, by hand, one process: a Llama actor from its config (hidden 1,024,
6 layers, 16 heads with 4 KV heads, vocab 32,000, sdpa) in bfloat16 with a peft LoRA adapter (r=32 on
q/k/v/o; the frozen base under `disable_adapter()` is the reference), and a separate critic
`LlamaForTokenClassification` (num_labels 1, 768 wide, 4 layers, bf16, full fine-tuning) giving a
value per token. Rollouts: 12 prompts of 100 ids, `generate()` in eval mode with
`do_sample=True`, 96 new tokens (min_new_tokens equal, eos disabled), `output_scores=True`,
`return_dict_in_generate=True`: the old log-probabilities come from the processed scores
(`torch.stack(scores, 1)`, log_softmax in fp32, `gather`), which are then dropped. Reference
log-probabilities (no_grad, adapter off), the critic's values, a rule reward on the last token minus
a per-token KL, GAE by a reversed loop; then `gradient_checkpointing_enable(use_reentrant=False)` on
both models and one PPO epoch over 2 micro-batches of 6 for actor (AdamW on LoRA) and critic (AdamW,
foreach); 2 steps, `gradient_checkpointing_disable()` before each rollout. Then `merge_and_unload()`
of the actor and a greedy evaluation rollout.

Sampled ids depend on values; shapes do not. 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, LlamaForTokenClassification

torch.manual_seed(2536)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, P, N, NEW, MB, CLIP, KL, LAM = 32000, 100, 12, 96, 6, 0.2, 0.05, 0.95
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
actor = get_peft_model(
    LlamaForCausalLM(config).to("cuda", torch.bfloat16),
    LoraConfig(
        r=32,
        lora_alpha=64,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
        lora_dropout=0.05,
        task_type="CAUSAL_LM",
    ),
)
critic_config = LlamaConfig(
    vocab_size=V,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=4,
    num_attention_heads=12,
    num_key_value_heads=4,
    num_labels=1,
    pad_token_id=0,
)
critic_config._attn_implementation = "sdpa"
critic = LlamaForTokenClassification(critic_config).to("cuda", torch.bfloat16)
actor_opt = torch.optim.AdamW([p for p in actor.parameters() if p.requires_grad], lr=1e-5)
critic_opt = torch.optim.AdamW(critic.parameters(), lr=1e-5, foreach=True)
report("load_actor_lora_and_critic")


def logps(m, seqs):
    logits = m(input_ids=seqs, use_cache=False).logits[:, P - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, seqs[:, P:].unsqueeze(-1)).squeeze(-1)


def values(seqs):
    return critic(input_ids=seqs).logits[:, P - 1 : -1, 0].float()


gen = torch.Generator(device="cuda").manual_seed(2536)
for step in range(2):
    prompts = torch.randint(3, V, (N, P), device="cuda", generator=gen)
    actor.eval()
    critic.eval()
    actor.base_model.model.gradient_checkpointing_disable()
    critic.gradient_checkpointing_disable()
    with torch.no_grad():
        out = actor.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            eos_token_id=None,
            pad_token_id=0,
            output_scores=True,
            return_dict_in_generate=True,
        )
        seqs = out.sequences
        old_lp = torch.stack(out.scores, 1).float().log_softmax(-1).gather(-1, seqs[:, P:, None]).squeeze(-1)
        del out
        with actor.disable_adapter():
            ref_lp = logps(actor, seqs)
        old_v = values(seqs)
        rewards = -KL * (old_lp - ref_lp)
        rewards[:, -1] += (seqs[:, -1] < V // 2).float()
        adv = torch.zeros_like(rewards)
        last = torch.zeros(N, device="cuda")
        for t in reversed(range(NEW)):
            nxt = old_v[:, t + 1] if t + 1 < NEW else torch.zeros(N, device="cuda")
            last = rewards[:, t] + nxt - old_v[:, t] + LAM * last
            adv[:, t] = last
        returns = adv + old_v
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)

    actor.train()
    critic.train()
    actor.base_model.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    actor.base_model.model.enable_input_require_grads()
    critic.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for idx in torch.arange(N, device="cuda").split(MB):
        lp = logps(actor, seqs[idx])
        ratio = torch.exp(lp - old_lp[idx])
        loss = torch.max(-adv[idx] * ratio, -adv[idx] * ratio.clamp(1 - CLIP, 1 + CLIP)).mean()
        loss.backward()
        actor_opt.step()
        actor_opt.zero_grad(set_to_none=True)
        v = values(seqs[idx])
        vloss = 0.5 * ((v - returns[idx]) ** 2).mean()
        vloss.backward()
        critic_opt.step()
        critic_opt.zero_grad(set_to_none=True)
    del prompts, seqs, old_lp, ref_lp, old_v, rewards, adv, last, returns, lp, ratio, loss, v, vloss
report("ppo_actor_critic_x2")

actor.base_model.model.gradient_checkpointing_disable()
merged = actor.merge_and_unload()
del actor, actor_opt
report("merge_and_unload")

merged.eval()
with torch.no_grad():
    prompts = torch.randint(3, V, (24, P), device="cuda", generator=gen)
    seqs = merged.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=False,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        eos_token_id=None,
        pad_token_id=0,
    )
del prompts, seqs
report("greedy_eval_merged")
