"""peft LoRA (r=16 on c_attn and c_proj) on a GPT2LMHeadModel from GPT2Config, fp32, no gradient
checkpointing, AdamW over the adapter parameters only, 3 steps (needs peft, transformers)."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import GPT2Config, GPT2LMHeadModel

EMBD, LAYERS, HEADS, VOCAB, B, SEQ = (
    (64, 2, 4, 256, 2, 16) if os.environ.get("SMOKE") else (1024, 12, 16, 50257, 8, 512)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)

config = GPT2Config(vocab_size=VOCAB, n_positions=1024, n_embd=EMBD, n_layer=LAYERS, n_head=HEADS)
base = GPT2LMHeadModel(config)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["c_attn", "c_proj"],
    fan_in_fan_out=True,
    task_type="CAUSAL_LM",
)
model = get_peft_model(base, lora).to(device)
model.print_trainable_parameters()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
if device == "cuda":
    print(f"model allocated {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    ids = torch.randint(0, VOCAB, (B, SEQ), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
