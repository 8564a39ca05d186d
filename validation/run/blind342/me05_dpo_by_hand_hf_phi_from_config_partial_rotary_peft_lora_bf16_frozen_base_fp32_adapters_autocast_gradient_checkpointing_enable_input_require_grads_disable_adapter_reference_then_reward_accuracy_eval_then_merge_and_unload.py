"""DPO written by hand on a peft LoRA model, the reference being the same model with its adapter switched
off: a PhiForCausalLM from a PhiConfig (1536 wide, 12 layers, 24 heads, partial rotary 0.5, GELU MLP
6144, 51,200 vocabulary, untied), bf16 base weights, LoRA (r 32, alpha 64) on q/k/v/dense/fc1/fc2 with the
adapter weights cast to fp32, HF gradient checkpointing (`gradient_checkpointing_enable`, reentrant) with
`enable_input_require_grads()`, bf16 autocast. Each step scores 8 chosen and 8 rejected responses (shared
384-token prompts, responses of 128, right-padded) in one concatenated batch, the reference log-probs under
`with model.disable_adapter(), torch.no_grad()`, the sigmoid DPO loss (beta 0.1) and AdamW, 3 steps.
Then a no_grad evaluation of implicit reward accuracy on 16 held-out pairs, then `merge_and_unload()` and
the merged model's chosen log-probs on the same pairs.

Phases: 0 model and adapter built; 1 first DPO step; 2 two more steps; 3 reward-accuracy eval;
4 merge_and_unload + merged scoring."""

import os

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import PhiConfig, PhiForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3425)
if SMALL:
    config = PhiConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        partial_rotary_factor=0.5,
    )
    PAIRS, P, R, EVAL_PAIRS = 2, 16, 8, 2
else:
    config = PhiConfig(
        vocab_size=51200,
        hidden_size=1536,
        intermediate_size=6144,
        num_hidden_layers=12,
        num_attention_heads=24,
        partial_rotary_factor=0.5,
        max_position_embeddings=2048,
    )
    PAIRS, P, R, EVAL_PAIRS = 8, 384, 128, 16
config.tie_word_embeddings = False
config.pad_token_id = 0
config._attn_implementation = "sdpa"
BETA = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def pairs(n):
    prompt = torch.randint(3, config.vocab_size, (n, P))
    chosen = torch.randint(3, config.vocab_size, (n, R))
    rejected = torch.randint(3, config.vocab_size, (n, R))
    rlen = torch.cat([torch.linspace(R // 2, R, n).long()] * 2)
    ids = torch.cat([torch.cat([prompt, chosen], 1), torch.cat([prompt, rejected], 1)])
    attn = (torch.arange(P + R)[None, :] < (P + rlen)[:, None]).long()
    ids = ids * attn
    loss_mask = attn.clone()
    loss_mask[:, :P] = 0
    return ids.to(device), attn.to(device), loss_mask.to(device)


def seq_logps(model, ids, attn, loss_mask):
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    logp = torch.gather(logits.float().log_softmax(-1), 2, ids[:, 1:, None]).squeeze(-1)
    return (logp * loss_mask[:, 1:]).sum(-1)


base = PhiForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
base.enable_input_require_grads()
model = get_peft_model(
    base,
    LoraConfig(
        r=32,
        lora_alpha=64,
        lora_dropout=0.05,
        target_modules=["q_proj", "k_proj", "v_proj", "dense", "fc1", "fc2"],
        task_type="CAUSAL_LM",
    ),
)
for p in model.parameters():
    if p.requires_grad:
        p.data = p.data.float()
model.print_trainable_parameters()
params = [p for p in model.parameters() if p.requires_grad]
optimizer = torch.optim.AdamW(params, lr=5e-5, weight_decay=0.0)
report("built")

model.train()
for step in range(3):
    ids, attn, loss_mask = pairs(PAIRS)
    with torch.no_grad(), model.disable_adapter():
        ref = seq_logps(model, ids, attn, loss_mask)
    pol = seq_logps(model, ids, attn, loss_mask)
    margin = BETA * ((pol[:PAIRS] - ref[:PAIRS]) - (pol[PAIRS:] - ref[PAIRS:]))
    loss = -F.logsigmoid(margin).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} dpo {loss.item():.4f} margin {margin.mean().item():.4f}")
    del pol, ref, margin, loss
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
ids, attn, loss_mask = pairs(EVAL_PAIRS)
with torch.no_grad():
    pol = seq_logps(model, ids, attn, loss_mask)
    with model.disable_adapter():
        ref = seq_logps(model, ids, attn, loss_mask)
reward = BETA * (pol - ref)
print("reward accuracy", (reward[:EVAL_PAIRS] > reward[EVAL_PAIRS:]).float().mean().item())
report("eval")

del optimizer, params
merged = model.merge_and_unload()
del model
with torch.no_grad():
    merged_logps = seq_logps(merged, ids[:EVAL_PAIRS], attn[:EVAL_PAIRS], loss_mask[:EVAL_PAIRS])
print("merged vs adapter", (merged_logps - pol[:EVAL_PAIRS]).abs().max().item())
report("merge")
