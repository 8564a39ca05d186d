"""JetMoE (transformers 5.17's `JetMoeForCausalLM`) built from config: every layer routes both its attention
(a mixture of attention heads: 8 query-projection experts, top-2 a token, over one shared key/value
projection) and its MLP (8 GLU experts, top-2) through JetMoE's own top-k gating, which splits the sorted
tokens by per-expert counts (`expert_size.tolist()`) into its `JetMoeParallelExperts`; d 1,024, 12 layers, 8
KV heads of 128, experts of hidden 1,408, vocabulary 32,000, tied embeddings. Pure bf16 weights, full
fine-tuning (JetMoE refuses gradient checkpointing), `output_router_logits=True` in the call (the
load-balancing loss added to the LM loss), foreach AdamW under a OneCycleLR schedule, 4 steps at batch 2 x
1,024 (phase 1); a no_grad evaluation of 2 batches (phase 2); then `generate()` with chunked prefill
(`prefill_chunk_size=256` over a 1,024-token prompt of batch 4, dynamic cache) and a custom `StoppingCriteria`
(greedy, min_new_tokens 32 and max_new_tokens 64, the criterion stopping every row at 32), phase 3; then the
same prompts without chunking, phase 4 (phase 0 the build). The experts' split sizes depend on the router's
choices (the total does not). Seeded. 5 phases."""

import torch
from transformers import JetMoeConfig, JetMoeForCausalLM, StoppingCriteria, StoppingCriteriaList

torch.manual_seed(2871)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class MaxNewTokens(StoppingCriteria):
    """Stops every sequence once it has `new` tokens beyond the prompt (a user's own criterion)."""

    def __init__(self, prompt_len, new):
        self.limit = prompt_len + new

    def __call__(self, input_ids, scores, **kwargs):
        done = input_ids.shape[-1] >= self.limit
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)


cfg = JetMoeConfig(
    vocab_size=32000,
    hidden_size=1024,
    num_hidden_layers=12,
    num_key_value_heads=8,
    kv_channels=128,
    num_attention_heads=16,
    intermediate_size=1408,
    num_local_experts=8,
    num_experts_per_tok=2,
    max_position_embeddings=4096,
    aux_loss_coef=0.01,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = JetMoeForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
print("params", sum(p.numel() for p in model.parameters()))
steps = 4
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05, foreach=True)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-4, total_steps=steps, pct_start=0.5)
report("jetmoe_built_bf16")

model.train()
for step in range(steps):
    ids = torch.randint(3, cfg.vocab_size, (2, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids, output_router_logits=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(out.loss.item(), 3), round(out.aux_loss.item(), 4))
del out
report("full_fine_tune")

model.eval()
with torch.no_grad():
    for _ in range(2):
        ids = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
        print("eval", round(model(input_ids=ids, labels=ids).loss.item(), 3))
del ids
report("no_grad_eval")

del opt, sched
prompts = torch.randint(3, cfg.vocab_size, (4, 1024), device="cuda")
stop = StoppingCriteriaList([MaxNewTokens(prompts.shape[1], 32)])
gen = model.generate(
    input_ids=prompts,
    attention_mask=torch.ones_like(prompts),
    max_new_tokens=64,
    min_new_tokens=32,
    stopping_criteria=stop,
    prefill_chunk_size=256,
    do_sample=False,
    pad_token_id=0,
)
print("chunked prefill", tuple(gen.shape))
del gen
report("generate_chunked_prefill")

gen = model.generate(
    input_ids=prompts,
    attention_mask=torch.ones_like(prompts),
    max_new_tokens=64,
    min_new_tokens=32,
    stopping_criteria=stop,
    do_sample=False,
    pad_token_id=0,
)
print("plain prefill", tuple(gen.shape))
report("generate_plain_prefill")
