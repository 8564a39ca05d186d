"""Sequence classification with LoRA: an HF LlamaForSequenceClassification from config (2048 wide,
12 layers) in bf16 wrapped by peft (task SEQ_CLS, rank 16 on q, k, v, o, the score head in
modules_to_save), AdamW (foreach), batch 16 at 512 tokens with right padding, 3 labels, 2 steps;
3 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(4204)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_labels=3,
        pad_token_id=0,
    )
    B, S = 2, 16
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=16,
        num_labels=3,
        pad_token_id=0,
    )
    B, S = 16, 512
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
base = LlamaForSequenceClassification(config).to(device=device, dtype=torch.bfloat16)
lora = LoraConfig(
    task_type="SEQ_CLS", r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]
)
model = get_peft_model(base, lora)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (B, S), device=device)
    mask = torch.ones_like(ids)
    ids[:, S - 64 :] = 0
    mask[:, S - 64 :] = 0
    labels = torch.randint(0, 3, (B,), device=device)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, mask, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
