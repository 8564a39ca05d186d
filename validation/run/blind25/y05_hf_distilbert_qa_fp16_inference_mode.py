"""HF DistilBertForQuestionAnswering from a DistilBertConfig (768 wide, 6 layers) in fp16 under
torch.inference_mode: batch 64 x 384 with the last 100 positions padded, start and end logits, the
best span per row via the outer sum of start and end logits masked to spans of at most 30 tokens;
then batch 16 x 512; 3 phases."""

import os

import torch
from transformers import DistilBertConfig, DistilBertForQuestionAnswering

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2505)
if SMALL:
    config = DistilBertConfig(vocab_size=300, dim=32, n_layers=1, n_heads=4, hidden_dim=64)
    SHAPES, PAD = [(2, 16), (1, 24)], 4
else:
    config = DistilBertConfig()
    SHAPES, PAD = [(64, 384), (16, 512)], 100
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = DistilBertForQuestionAnswering(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for b, t in SHAPES:
    with torch.inference_mode():
        ids = torch.randint(0, config.vocab_size, (b, t), device=device)
        mask = torch.ones_like(ids)
        mask[:, t - PAD :] = 0
        out = model(input_ids=ids, attention_mask=mask)
        scores = out.start_logits[:, :, None] + out.end_logits[:, None, :]
        span = torch.ones(t, t, dtype=torch.bool, device=device).triu().tril(29)
        best = scores.masked_fill(~span, float("-inf")).flatten(1).argmax(-1)
        assert best.shape == (b,)
        del ids, mask, out, scores, span, best
    if device == "cuda":
        print(
            f"batch {b}x{t} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
