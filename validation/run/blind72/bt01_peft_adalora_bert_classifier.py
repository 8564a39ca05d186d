"""peft AdaLoRA (SVD-parameterised adapters with a rank allocator) on an HF BertForSequenceClassification
from a BertConfig (bert-base sizes), fp32, 256-token sequences at batch 32, AdamW, the rank allocator
updated after each step, 3 steps; 4 phases."""

import os

import torch
from peft import AdaLoraConfig, get_peft_model
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7201)
if SMALL:
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_labels=4,
    )
    B, L = 2, 16
else:
    config = BertConfig(num_labels=4)
    B, L = 32, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BertForSequenceClassification(config)
peft_config = AdaLoraConfig(
    task_type="SEQ_CLS",
    init_r=12,
    target_r=4,
    tinit=1,
    tfinal=1,
    deltaT=1,
    total_step=3,
    target_modules=["query", "value", "dense"],
)
model = get_peft_model(model, peft_config).to(device)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(5, config.vocab_size, (B, L), device=device)
    labels = torch.randint(0, 4, (B,), device=device)
    loss = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
    loss.backward()
    optimizer.step()
    model.base_model.update_and_allocate(step)
    optimizer.zero_grad(set_to_none=True)
    del ids, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
