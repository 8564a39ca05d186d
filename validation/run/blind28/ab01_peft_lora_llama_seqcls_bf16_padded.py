"""peft LoRA (r=16 on q/k/v/o, dropout 0.05) on HF LlamaForSequenceClassification from a small
LlamaConfig (1024 wide, 8 layers, 16 heads with 8 KV heads), bf16, right-padded batches of 16 at up
to 512 tokens with an attention mask and pad_token_id set, 5 labels, the score head trained too
(modules_to_save), AdamW (foreach), 2 steps; 3 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2801)
if SMALL:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S = 2, 16
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, S = 16, 512
config.num_labels, config.pad_token_id = 5, 0
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
base = LlamaForSequenceClassification(config).to(device=device, dtype=torch.bfloat16)
lora = LoraConfig(
    r=16,
    lora_alpha=32,
    lora_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
    modules_to_save=["score"],
    task_type="SEQ_CLS",
)
model = get_peft_model(base, lora)
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
lengths = torch.linspace(S // 2, S, B).long()
for step in range(2):
    ids = torch.randint(1, config.vocab_size, (B, S))
    mask = (torch.arange(S)[None, :] < lengths[:, None]).long()
    ids = (ids * mask).to(device)
    mask = mask.to(device)
    labels = torch.randint(0, 5, (B,), device=device)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, mask, labels, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
