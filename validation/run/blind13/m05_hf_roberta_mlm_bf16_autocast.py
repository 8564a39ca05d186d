"""HF RobertaForMaskedLM from a RobertaConfig (512 wide, 8 layers, 8 heads, vocabulary 50265), masking 15% of
the tokens on the CPU as DataCollatorForLanguageModeling does (labels -100 elsewhere), moved to the GPU,
fp32 weights under bf16 autocast, AdamW (foreach), gradient clipping, batch 16 x 256, 3 steps."""

import os

import torch
from transformers import RobertaConfig, RobertaForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1305)
if SMALL:
    config = RobertaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=64)
    BATCH, SEQ = 2, 16
else:
    config = RobertaConfig(vocab_size=50265, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                           intermediate_size=2048, max_position_embeddings=514)
    BATCH, SEQ = 16, 256
device = "cuda" if torch.cuda.is_available() else "cpu"
model = RobertaForMaskedLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
g = torch.Generator().manual_seed(5)
for step in range(3):
    ids = torch.randint(3, config.vocab_size, (BATCH, SEQ), generator=g)
    labels = ids.clone()
    chosen = torch.rand(BATCH, SEQ, generator=g) < 0.15
    labels[~chosen] = -100
    ids[chosen] = 4  # <mask>
    ids, labels = ids.to(device), labels.to(device)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
