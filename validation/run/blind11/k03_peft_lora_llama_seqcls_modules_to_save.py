"""peft LoRA (r=16 on q/k/v/o, dropout 0.05) on HF LlamaForSequenceClassification from a LlamaConfig
(2048 wide, 8 layers, GQA 16/4, 5 labels, pad token set), task SEQ_CLS so the score head is a trainable
modules_to_save copy, bf16 weights, AdamW, batch 16 x 512, 3 steps."""

import os

import torch
from peft import LoraConfig, TaskType, get_peft_model
from transformers import LlamaConfig, LlamaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1103)
if SMALL:
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=500, num_labels=5, pad_token_id=0)
    BATCH, SEQ = 2, 16
else:
    config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=4, vocab_size=32000, num_labels=5, pad_token_id=0)
    BATCH, SEQ = 16, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = LlamaForSequenceClassification(config).to(device=device, dtype=torch.bfloat16)
lora = LoraConfig(task_type=TaskType.SEQ_CLS, r=16, lora_alpha=32, lora_dropout=0.05,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
model = get_peft_model(model, lora)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(1, config.vocab_size, (BATCH, SEQ), device=device)
    ids[:, -37:] = 0
    mask = (ids != 0).long()
    labels = torch.randint(0, 5, (BATCH,), device=device)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
