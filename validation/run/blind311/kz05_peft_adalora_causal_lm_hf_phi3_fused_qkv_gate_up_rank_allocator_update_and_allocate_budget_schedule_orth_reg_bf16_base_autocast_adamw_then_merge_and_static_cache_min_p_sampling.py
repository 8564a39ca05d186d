"""peft AdaLoRA (AdaLoraConfig: init_r 12 pruned to a target_r 4 budget; tinit 1, tfinal 1, deltaT 1 over 5
steps) on a Phi3ForCausalLM from a small Phi3Config (1536 wide, 10 layers, 24 heads of 64 with 8 KV heads,
fused qkv_proj and gate_up_proj, untied 32,064 vocabulary), targeting the fused qkv_proj, o_proj,
gate_up_proj and down_proj. bf16 base, fp32 adapters under bf16 autocast, AdamW (foreach), causal-LM loss
on right-padded 8 x 512 batches with the orthogonality regulariser that AdaLoRA's forward adds to the loss
(P P^T - I over every lora_A and lora_B); after each optimizer step base_model.update_and_allocate(step)
updates the EMA sensitivity/uncertainty scores from the gradients and masks the lowest-importance singular
values (kthvalue over all layers' scores), with the final budget forced on the last step. Then
merge_and_unload, and generate() with cache_implementation="static" run eagerly (disable_compile=True:
no automatic torch.compile of the decoding step): min_p sampling with num_return_sequences 3 on 6
left-padded prompts, then a greedy batch of 16 longer prompts.

Phases: 0 model and adapter built; 1 first step; 2 four more steps (masking, then final budget); 3 merged
and static-cache sampling; 4 static-cache greedy batch."""

import os

import torch
from peft import AdaLoraConfig, get_peft_model
from transformers import Phi3Config, Phi3ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3115)
if SMALL:
    config = Phi3Config(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    B, S, G, PL, NEW, G2, PL2, NEW2 = 2, 32, 2, 12, 4, 4, 20, 4
else:
    config = Phi3Config(
        vocab_size=32064,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=10,
        num_attention_heads=24,
        num_key_value_heads=8,
        max_position_embeddings=4096,
    )
    B, S, G, PL, NEW, G2, PL2, NEW2 = 8, 512, 6, 96, 48, 16, 384, 32
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
STEPS = 5
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = Phi3ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
adalora = AdaLoraConfig(
    task_type="CAUSAL_LM",
    init_r=12,
    target_r=4,
    lora_alpha=32,
    lora_dropout=0.05,
    tinit=1,
    tfinal=1,
    deltaT=1,
    beta1=0.85,
    beta2=0.85,
    orth_reg_weight=0.5,
    total_step=STEPS,
    target_modules=["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
)
model = get_peft_model(base, adalora)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, foreach=True)
report("built")

lengths = torch.linspace(S // 2, S, B).long()
model.train()
for step in range(STEPS):
    ids = torch.randint(3, config.vocab_size, (B, S))
    mask = (torch.arange(S)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    labels = ids.masked_fill(mask == 0, -100)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), labels=labels.to(device))
    out.loss.backward()
    optimizer.step()
    model.base_model.update_and_allocate(step)
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("step0")
report("steps1-4")

merged = model.merge_and_unload()
merged.eval()
del model, optimizer
prompts = torch.randint(3, config.vocab_size, (G, PL))
plen = torch.linspace(PL // 3, PL, G).long()
attn = (torch.arange(PL)[None, :] >= (PL - plen)[:, None]).long()
with torch.no_grad():
    seqs = merged.generate(
        input_ids=(prompts * attn).to(device),
        attention_mask=attn.to(device),
        cache_implementation="static",
        disable_compile=True,
        do_sample=True,
        min_p=0.05,
        temperature=1.0,
        top_k=0,
        num_return_sequences=3,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=0,
        eos_token_id=2,
    )
print("sampled", tuple(seqs.shape))
del seqs
report("static-sample")

prompts = torch.randint(3, config.vocab_size, (G2, PL2))
plen = torch.linspace(PL2 // 4, PL2, G2).long()
attn = (torch.arange(PL2)[None, :] >= (PL2 - plen)[:, None]).long()
with torch.no_grad():
    seqs = merged.generate(
        input_ids=(prompts * attn).to(device),
        attention_mask=attn.to(device),
        cache_implementation="static",
        disable_compile=True,
        do_sample=False,
        max_new_tokens=NEW2,
        min_new_tokens=NEW2,
        pad_token_id=0,
        eos_token_id=2,
    )
print("greedy", tuple(seqs.shape))
report("static-greedy")
