"""DoRA with rsLoRA scaling on a bf16 Hugging Face Mistral (MistralConfig: 1,024 wide, 8 layers, 16
heads, 8 key-value heads, MLP of 3,584, 32,000 vocabulary, untied head) with the base's
gradient_checkpointing_enable() (its default, reentrant) before get_peft_model, which then makes
the embeddings' output require grad: LoRA rank 32 with use_dora and use_rslora on target_modules
"all-linear" (every projection of attention and MLP, the head excluded), the lm_head trained whole
as a modules_to_save copy; fused AdamW at batch 4 x 2,048 for 3 steps; then the optimizer dropped,
`merge_and_unload()` folding the DoRA magnitudes and low-rank products into the base weights, and
greedy generation of 64 tokens for 4 prompts of 512 tokens with the KV cache; 5 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import MistralConfig, MistralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13704)
B, T, P, NEW = (2, 64, 16, 4) if SMALL else (4, 2048, 512, 64)
cfg = MistralConfig(
    vocab_size=32000 if not SMALL else 512,
    hidden_size=1024 if not SMALL else 64,
    intermediate_size=3584 if not SMALL else 128,
    num_hidden_layers=8 if not SMALL else 2,
    num_attention_heads=16 if not SMALL else 4,
    num_key_value_heads=8 if not SMALL else 2,
    max_position_embeddings=4096,
    sliding_window=None,
    tie_word_embeddings=False,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
base = MistralForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable()
lcfg = LoraConfig(
    r=32,
    lora_alpha=16,
    lora_dropout=0.05,
    use_dora=True,
    use_rslora=True,
    target_modules="all-linear",
    modules_to_save=["lm_head"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lcfg)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4, fused=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    x = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda" and step in (0, 2):
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del opt, loss, x
merged = model.merge_and_unload()
del model, base
merged.eval()
if device == "cuda":
    print(
        f"merged allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

prompt = torch.randint(0, cfg.vocab_size, (4, P), device=device)
with torch.no_grad():
    out = merged.generate(
        input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW, do_sample=False
    )
if device == "cuda":
    print(
        f"generated {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
