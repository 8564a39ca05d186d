"""peft LoRA on a small LlamaForCausalLM built from LlamaConfig (random init, bf16), with gradient
checkpointing and enable_input_require_grads, AdamW on the adapters."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, T = (
    (64, 128, 2, 4, 2, 256, 2, 16) if os.environ.get("SMOKE") else (1024, 2816, 8, 16, 4, 32000, 4, 512)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

config = LlamaConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=2048,
    use_cache=False,
)
model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
if device == "cuda":
    print(f"base model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.gradient_checkpointing_enable()
model.enable_input_require_grads()
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
if device == "cuda":
    print(f"with adapters {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    input_ids = torch.randint(0, VOCAB, (B, T), device=device)
    attention_mask = torch.ones_like(input_ids)
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=input_ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        print(f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}")
        torch.cuda.reset_peak_memory_stats()
