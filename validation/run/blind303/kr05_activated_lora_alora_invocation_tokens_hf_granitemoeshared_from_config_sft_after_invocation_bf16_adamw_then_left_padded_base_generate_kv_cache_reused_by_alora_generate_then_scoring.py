"""Activated LoRA (aLoRA, peft LoraConfig alora_invocation_tokens) served next to its base model, the
"intrinsics" recipe: the adapter weights act only from the last occurrence of an invocation token
sequence onward, so the base model's KV cache of everything before the invocation stays valid for the
adapter. A HF GraniteMoeSharedForCausalLM (8 local experts top-2 plus a shared MLP, muP-style
embedding / residual / attention multipliers and logits scaling) built from a small config in bf16;
aLoRA r=32 on q/k/v (aLoRA adapts attention only here). SFT: each row is a prompt, the 3 invocation
tokens, and the adapter's answer, labels only on the answer; AdamW, 2 steps. Serving: a left-padded
batch of prompts is answered by the base model (disable_adapter, generate with return_dict_in_generate
keeping past_key_values), then the invocation tokens are appended and the aLoRA adapter generates its
short evaluation reusing that cache (only the new tokens are prefilled: peft computes alora_offsets
from input_ids). Last, the whole conversation is scored by one aLoRA forward with labels on the adapter's
tokens only.

Phases: 0 model and aLoRA built; 1 two SFT steps; 2 base-model generate keeping its KV cache; 3 aLoRA
generate reusing the base cache; 4 full-sequence aLoRA scoring."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import GraniteMoeSharedConfig, GraniteMoeSharedForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3035)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = GraniteMoeSharedConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=64,
        shared_intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    B, P, ANS, BASE_NEW, AL_NEW = 2, 24, 8, 6, 4
else:
    config = GraniteMoeSharedConfig(
        vocab_size=49152,
        hidden_size=1024,
        intermediate_size=512,
        shared_intermediate_size=2048,
        num_hidden_layers=10,
        num_attention_heads=16,
        num_key_value_heads=4,
        num_local_experts=8,
        num_experts_per_tok=2,
    )
    B, P, ANS, BASE_NEW, AL_NEW = 8, 768, 64, 96, 16
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config.embedding_multiplier, config.residual_multiplier = 12.0, 0.22
config.attention_multiplier, config.logits_scaling = 0.0078125, 8.0
INVOKE = [5, 6, 7]


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = GraniteMoeSharedForCausalLM(config).to(device=device, dtype=torch.bfloat16)
acfg = LoraConfig(
    r=32,
    lora_alpha=32,
    lora_dropout=0.0,
    target_modules=["q_proj", "k_proj", "v_proj"],
    alora_invocation_tokens=INVOKE,
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, acfg)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
report("built")


def left_padded(n, length):
    lens = torch.linspace(length // 2, length, n).long()
    mask = (torch.arange(length)[None, :] >= (length - lens)[:, None]).long()
    ids = torch.randint(8, config.vocab_size, (n, length)) * mask
    return ids, mask


model.train()
for step in range(2):
    ids, mask = left_padded(B, P)
    inv = torch.tensor(INVOKE).expand(B, -1)
    ans = torch.randint(8, config.vocab_size, (B, ANS))
    full = torch.cat([ids, inv, ans], dim=1)
    full_mask = torch.cat([mask, torch.ones(B, len(INVOKE) + ANS, dtype=torch.long)], dim=1)
    labels = torch.cat([torch.full((B, P + len(INVOKE)), -100), ans], dim=1)
    out = model(input_ids=full.to(device), attention_mask=full_mask.to(device), labels=labels.to(device))
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"sft step {step} loss {out.loss.item():.4f}")
    del out
del optimizer
report("sft")

model.eval()
ids, mask = left_padded(B, P)
ids, mask = ids.to(device), mask.to(device)
with torch.no_grad(), model.disable_adapter():
    base_out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=BASE_NEW,
        min_new_tokens=BASE_NEW,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
    )
cache = base_out.past_key_values
print("base answered", tuple(base_out.sequences.shape), "cache length", cache.get_seq_length())
report("base_generate")

inv = torch.tensor(INVOKE, device=device).expand(B, -1)
conv = torch.cat([base_out.sequences, inv], dim=1)
conv_mask = torch.cat([mask, torch.ones(B, conv.shape[1] - P, dtype=torch.long, device=device)], dim=1)
with torch.no_grad():
    al_out = model.generate(
        input_ids=conv,
        attention_mask=conv_mask,
        past_key_values=cache,
        max_new_tokens=AL_NEW,
        min_new_tokens=AL_NEW,
        do_sample=False,
        pad_token_id=0,
        return_dict_in_generate=True,
    )
print("alora judged", tuple(al_out.sequences.shape))
del cache, base_out
report("alora_generate")

seq = al_out.sequences
seq_mask = torch.cat([conv_mask, torch.ones(B, AL_NEW, dtype=torch.long, device=device)], dim=1)
labels = seq.clone()
labels[:, : conv.shape[1]] = -100
with torch.no_grad():
    scored = model(input_ids=seq, attention_mask=seq_mask, labels=labels)
print("alora nll", round(scored.loss.item(), 4))
report("score")
