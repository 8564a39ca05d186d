"""HF DistilBertForQuestionAnswering from a DistilBertConfig (768 wide, 6 layers), start/end positions,
fp32, transformers' Adafactor (scale_parameter, relative_step off, lr 1e-3: factored second moments),
batch 32 x 384, 3 steps."""

import os

import torch
from transformers import DistilBertConfig, DistilBertForQuestionAnswering
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(1101)
if SMALL:
    config = DistilBertConfig(dim=32, hidden_dim=64, n_layers=1, n_heads=2, vocab_size=500)
    BATCH, SEQ = 2, 16
else:
    config = DistilBertConfig()
    BATCH, SEQ = 32, 384
device = "cuda" if torch.cuda.is_available() else "cpu"
model = DistilBertForQuestionAnswering(config).to(device)
optimizer = Adafactor(model.parameters(), lr=1e-3, scale_parameter=True, relative_step=False, warmup_init=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ), device=device)
    mask = torch.ones_like(ids)
    start = torch.randint(0, SEQ, (BATCH,), device=device)
    end = torch.randint(0, SEQ, (BATCH,), device=device)
    loss = model(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=end).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
