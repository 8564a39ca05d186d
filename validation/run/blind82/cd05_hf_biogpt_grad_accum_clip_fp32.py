"""HF BioGptForCausalLM (scaled embeddings, learned positions, pre-norm decoder) built from its
config, 12 layers, 1,024 wide, a 42,384 vocabulary, fp32, gradient accumulation over 2 micro-batches
of 4 x 512 tokens (padded, the padding's labels -100), gradient clipping to 1.0, Adam with a linear
warm-up, 2 optimizer steps; 3 phases."""

import os

import torch
from transformers import BioGptConfig, BioGptForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8205)
if SMALL:
    config = BioGptConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = BioGptConfig(
        vocab_size=42384,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        max_position_embeddings=1024,
    )
    B, L = 4, 512
ACCUM = 2
device = "cuda" if torch.cuda.is_available() else "cpu"
model = BioGptForCausalLM(config).to(device)
model.train()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _micro in range(ACCUM):
        ids = torch.randint(4, config.vocab_size, (B, L), device=device)
        lengths = torch.randint(L // 2, L + 1, (B,), device=device)
        mask = torch.arange(L, device=device)[None, :] < lengths[:, None]
        ids = ids.masked_fill(~mask, config.pad_token_id)
        labels = ids.masked_fill(~mask, -100)
        loss = model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss / ACCUM
        loss.backward()
        del ids, lengths, mask, labels, loss
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
