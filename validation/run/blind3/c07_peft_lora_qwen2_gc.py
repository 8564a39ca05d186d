"""peft LoRA (r=32, all linear projections) on a Qwen2ForCausalLM from Qwen2Config in bf16,
gradient_checkpointing_enable() + enable_input_require_grads, AdamW on adapters, 2 steps (needs peft)."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

HID, INTER, LAYERS, HEADS, KV, VOCAB, B, SEQ = (
    (64, 128, 2, 4, 2, 512, 2, 32) if os.environ.get("SMOKE") else (1536, 4096, 10, 12, 2, 100000, 4, 2048)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(17)

config = Qwen2Config(
    vocab_size=VOCAB,
    hidden_size=HID,
    intermediate_size=INTER,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    use_cache=False,
)
base = Qwen2ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
base.enable_input_require_grads()
lora = LoraConfig(
    r=32,
    lora_alpha=64,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lora)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    input_ids = torch.randint(0, VOCAB, (B, SEQ), device=device)
    labels = input_ids.clone()
    labels[:, : SEQ // 4] = -100
    loss = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
