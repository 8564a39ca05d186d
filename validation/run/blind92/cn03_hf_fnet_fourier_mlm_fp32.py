"""HF transformers FNet (token mixing by a 2-D complex FFT over sequence and hidden, keeping the real
part) pretraining head (MLM + next-sentence) built from a config at 8 layers, 512 wide, vocabulary
32,000, fp32 with AdamW, batch 16 x 512 tokens with 15% of positions masked (labels -100 elsewhere)
drawn on the GPU, 3 steps, then an eval forward under inference_mode; 5 phases."""

import os

import torch
from transformers import FNetConfig, FNetForPreTraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9203)
if SMALL:
    cfg = FNetConfig(
        vocab_size=128, hidden_size=32, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=64
    )
    B, L = 2, 16
else:
    cfg = FNetConfig(
        vocab_size=32000,
        hidden_size=512,
        num_hidden_layers=8,
        intermediate_size=2048,
        max_position_embeddings=512,
    )
    B, L = 16, 512
MASK_ID = 4
device = "cuda" if torch.cuda.is_available() else "cpu"
model = FNetForPreTraining(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(5, cfg.vocab_size, (B, L), device=device)
    masked = torch.rand(B, L, device=device) < 0.15
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    inputs = ids.masked_fill(masked, MASK_ID)
    nsp = torch.randint(0, 2, (B,), device=device)
    out = model(input_ids=inputs, labels=labels, next_sentence_label=nsp)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, masked, labels, inputs, nsp, out
model.eval()
with torch.inference_mode():
    ids = torch.randint(5, cfg.vocab_size, (B, L), device=device)
    pred = model(input_ids=ids).prediction_logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
