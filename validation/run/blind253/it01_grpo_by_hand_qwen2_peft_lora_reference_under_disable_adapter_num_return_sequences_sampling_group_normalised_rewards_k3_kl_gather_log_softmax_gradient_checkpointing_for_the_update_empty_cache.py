"""GRPO written by hand, as TRL's GRPOTrainer does it in one process: a Qwen2 decoder from its config
(hidden 1,024, 6 layers, 16 heads with 2 KV heads, vocab 32,000, tied embeddings, sdpa) in bfloat16 with
a peft LoRA adapter (r=16 on the attention and MLP projections) whose frozen base is the reference model
(`disable_adapter()`). Each step: rollouts with `generate()` in eval mode (`use_cache=True`, 8 prompts of
96 ids, G=4 samples each through `num_return_sequences`, `do_sample=True`, top_k 50, 128 new tokens with
min_new_tokens equal and eos disabled, so every completion has the same length; a completion mask from
the first eos id, TRL's, by `torch.where`); a rule-based reward on the GPU (the share of completion
tokens in the lower half of the vocabulary), advantages normalised within each group;
`torch.cuda.empty_cache()` as verl does between rollout and update; then in train mode with
`gradient_checkpointing_enable(use_reentrant=False)`: the reference's per-token log-probabilities under
`no_grad` and `disable_adapter()`, the policy's (log_softmax in fp32 over the vocabulary, `gather` of the
sampled ids), the k3 KL estimator, the clipped surrogate (old log-probabilities the detached current
ones, one inner step), AdamW on the LoRA parameters; 2 steps. Then a sampled evaluation rollout of 16
prompts with 2 samples each.

Sampled ids depend on values; shapes do not (fixed lengths). 4 phases."""

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.manual_seed(2531)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


V, P, N, G, NEW, BETA, EPS = 32000, 96, 8, 4, 128, 0.04, 0.2
config = Qwen2Config(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
config._attn_implementation = "sdpa"
base = Qwen2ForCausalLM(config).to("cuda", torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.0,
    task_type="CAUSAL_LM",
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
)
model = get_peft_model(base, lora)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
report("load_policy_lora")


def rollout(prompts, g):
    model.eval()
    model.base_model.model.gradient_checkpointing_disable()
    with torch.no_grad():
        seqs = model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            do_sample=True,
            top_k=50,
            temperature=1.0,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            num_return_sequences=g,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
        )
    return seqs


def token_logps(m, seqs):
    logits = m(input_ids=seqs, use_cache=False).logits[:, P - 1 : -1]
    return logits.float().log_softmax(-1).gather(-1, seqs[:, P:].unsqueeze(-1)).squeeze(-1)


gen = torch.Generator(device="cuda").manual_seed(2531)
for step in range(2):
    prompts = torch.randint(3, V, (N, P), device="cuda", generator=gen)
    seqs = rollout(prompts, G)
    completion = seqs[:, P:]
    is_eos = completion == 2
    eos_idx = torch.where(
        is_eos.any(1), is_eos.int().argmax(1), torch.full_like(is_eos[:, 0], NEW, dtype=torch.long)
    )
    mask = (torch.arange(NEW, device="cuda")[None] <= eos_idx[:, None]).float()
    rewards = (completion < V // 2).float().mean(-1)
    grouped = rewards.view(N, G)
    adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
    torch.cuda.empty_cache()

    model.train()
    model.base_model.model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    model.base_model.model.enable_input_require_grads()
    with torch.no_grad(), model.disable_adapter():
        ref = token_logps(model, seqs)
    logp = token_logps(model, seqs)
    old = logp.detach()
    ratio = torch.exp(logp - old)
    surr = torch.min(ratio * adv[:, None], torch.clamp(ratio, 1 - EPS, 1 + EPS) * adv[:, None])
    kl = torch.exp(ref - logp) - (ref - logp) - 1
    loss = (((-surr + BETA * kl) * mask).sum(-1) / mask.sum(-1)).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del seqs, completion, is_eos, eos_idx, mask, rewards, grouped, adv, ref, logp, old, ratio, surr, kl, loss
report("grpo_rollout_and_update_x2")

torch.cuda.empty_cache()
report("after_empty_cache")

eval_prompts = torch.randint(3, V, (16, P), device="cuda", generator=gen)
seqs = rollout(eval_prompts, 2)
score = (seqs[:, P:] < V // 2).float().mean()
del seqs, score
report("eval_rollout_16x2")
