"""Several LoRA adapters on one base model, merged with peft (add_weighted_adapter's TIES and cat
combinations, merge_adapter / unmerge_adapter, merge_and_unload), on random tokens.

Base: a Qwen2ForCausalLM from Qwen2Config (12 layers of 1024, 16 heads, 4 key/value heads, SwiGLU 2816,
vocabulary 32,000, untied lm_head) in bf16. Three LoRA adapters ("math", "code", "chat": r 16, alpha
32, dropout 0.05, every attention and MLP projection), fp32 as peft's autocast_adapter_dtype makes them,
each trained in turn (set_adapter, a fresh AdamW over its parameters, 2 steps of bf16 autocast at batch
4 x 1024; the first adapter's steps reported alone).
Merging: add_weighted_adapter over the three with combination_type "ties" (density 0.5, total sign)
and "cat" (rank 48), each evaluated by its loss on 8 x 1024 tokens under inference_mode; then "math"
merged into the base weights (merge_adapter), a forward, unmerged (unmerge_adapter), a forward again;
finally merge_and_unload of the TIES mix and greedy generation of 32 tokens after 128-token prompts at
batch 8 with the KV cache (min_new_tokens fixes the length). 4 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2076)
if SMALL:
    cfg = Qwen2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    SEQ, BATCH, EVAL_B, PROMPT, NEW = 64, 2, 2, 16, 4
else:
    cfg = Qwen2Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=4,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    SEQ, BATCH, EVAL_B, PROMPT, NEW = 1024, 4, 8, 128, 32
cfg.pad_token_id = 0
cfg.eos_token_id = 1
ADAPTERS = ["math", "code", "chat"]
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


base = Qwen2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lora, adapter_name=ADAPTERS[0])
for name in ADAPTERS[1:]:
    model.add_adapter(name, lora)
model.print_trainable_parameters()

for i, name in enumerate(ADAPTERS):
    model.set_adapter(name)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4, weight_decay=0.0)
    for step in range(2):
        ids = torch.randint(2, cfg.vocab_size, (BATCH, SEQ), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    del opt
    print(f"adapter {name} loss {loss.item():.4f}")
    if i == 0:
        report("first adapter")
report("other adapters")

eval_ids = torch.randint(2, cfg.vocab_size, (EVAL_B, SEQ), device=device)


@torch.inference_mode()
def eval_loss():
    model.eval()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        return model(input_ids=eval_ids, labels=eval_ids).loss.item()


model.add_weighted_adapter(ADAPTERS, [1.0, 1.0, 1.0], "ties_mix", combination_type="ties", density=0.5)
model.add_weighted_adapter(ADAPTERS, [0.5, 0.3, 0.2], "cat_mix", combination_type="cat")
for name in ("ties_mix", "cat_mix"):
    model.set_adapter(name)
    print(f"{name} eval loss {eval_loss():.4f}")
report("weighted adapters")

model.set_adapter("math")
model.merge_adapter()
merged = eval_loss()
model.unmerge_adapter()
unmerged = eval_loss()
print(f"math merged {merged:.4f} unmerged {unmerged:.4f}")
model.delete_adapter("cat_mix")
merged_model = model.merge_and_unload(adapter_names=["ties_mix"])
del model
merged_model.eval()
with torch.inference_mode():
    prompt = torch.randint(2, cfg.vocab_size, (8, PROMPT), device=device)
    out = merged_model.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generated {tuple(out.shape)}")
report("merge, unmerge, merge_and_unload and generate")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
