"""Direct Preference Optimization written by hand with a peft LoRA policy whose frozen base doubles as
the reference model (the usual memory-saving trick of TRL's DPOTrainer with a peft model): a Llama
from config (1,024 wide, 8 layers, 16 heads with 4 KV heads, vocab 32,000, sdpa) in bfloat16 on the
GPU, `gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})`,
`enable_input_require_grads()`, LoRA r=16 alpha=16 `use_rslora=True` lora_dropout=0.1 on q/k/v/o and
the MLP. Each step takes 4 prompts of 128 ids with a chosen and a rejected answer of 256 ids
(concatenated into one batch of 8 x 384): reference log-probabilities under `torch.no_grad()` and
`model.disable_adapter()`, the policy's with the adapter (bf16 autocast; log_softmax in fp32 and a
gather of the answer tokens), loss -logsigmoid(beta * margin), fused AdamW on the LoRA parameters;
3 steps. Then an evaluation of the implicit reward over 8 held-out pairs (no_grad, adapter on and
off). Then greedy decoding with the policy, 64 new tokens for one prompt of 256 ids, first
`assistant_model=` a 2-layer 256-wide draft Llama (same vocab, bf16), then
`prompt_lookup_num_tokens=10`.

Value-dependent sizes: min_new_tokens = max_new_tokens fixes the outputs' lengths, but how many
draft tokens each verification step accepts depends on values: the twin, whose logits are all
zeros, accepts every draft token (transformers 5's defaults: 20 candidates at most, a constant
schedule, drafting stopped early where the draft's top probability is under 0.4, near-uniform
logits in both) and prompt lookup finds a match every round (its prompt reads as zeros); the GPU's
random models accept few, so the number of verification forwards and the cache croppings differ
there (KV caches of a few MB). 5 phases."""

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2394)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


V, P, R, BETA = 32000, 128, 256, 0.1
config = LlamaConfig(vocab_size=V, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                     num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                     bos_token_id=1, eos_token_id=2, pad_token_id=0)
config._attn_implementation = "sdpa"
base = LlamaForCausalLM(config).to("cuda", torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
lora = LoraConfig(r=16, lora_alpha=16, use_rslora=True, lora_dropout=0.1,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                  task_type="CAUSAL_LM")
model = get_peft_model(base, lora)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-5, fused=True)
report("load_and_lora")

g = torch.Generator().manual_seed(2394)


def pairs(n):
    prompt = torch.randint(3, V, (n, P), generator=g)
    chosen = torch.randint(3, V, (n, R), generator=g)
    rejected = torch.randint(3, V, (n, R), generator=g)
    ids = torch.cat([torch.cat([prompt, chosen], 1), torch.cat([prompt, rejected], 1)], 0)
    return ids.cuda()


def answer_logps(m, ids):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = m(input_ids=ids, use_cache=False).logits[:, P - 1:-1]
    logp = logits.float().log_softmax(-1).gather(-1, ids[:, P:].unsqueeze(-1)).squeeze(-1)
    return logp.sum(-1)


def dpo_loss(policy, ref):
    n = policy.shape[0] // 2
    margin = (policy[:n] - ref[:n]) - (policy[n:] - ref[n:])
    return -F.logsigmoid(BETA * margin).mean()


model.train()
for step in range(3):
    ids = pairs(4)
    with torch.no_grad(), model.disable_adapter():
        ref = answer_logps(model, ids)
    loss = dpo_loss(answer_logps(model, ids), ref)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
report("dpo_steps")

model.eval()
ids = pairs(8)
with torch.no_grad():
    with model.disable_adapter():
        ref = answer_logps(model, ids)
    pol = answer_logps(model, ids)
    reward = BETA * (pol - ref)
print("reward accuracy", (reward[:8] > reward[8:]).float().mean().item())
report("implicit_reward_eval")

draft = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=256, intermediate_size=704, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                                     bos_token_id=1, eos_token_id=2, pad_token_id=0)).to("cuda", torch.bfloat16).eval()
prompt = torch.randint(3, V, (1, 256), generator=g).cuda()
with torch.no_grad():
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), assistant_model=draft,
                         max_new_tokens=64, min_new_tokens=64, do_sample=False)
print(out.shape)
report("assisted_decoding")

with torch.no_grad():
    out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), prompt_lookup_num_tokens=10,
                         max_new_tokens=64, min_new_tokens=64, do_sample=False)
print(out.shape)
report("prompt_lookup_decoding")
