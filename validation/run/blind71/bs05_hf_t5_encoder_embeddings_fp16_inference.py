"""HF T5EncoderModel from a T5Config (t5-large sizes: 24 layers, 1,024 wide) in fp16, mean-pooled
sentence embeddings of 3 batches of 64 x 512 tokens under torch.inference_mode, the embeddings kept;
4 phases."""

import os

import torch
from transformers import T5Config, T5EncoderModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7105)
if SMALL:
    config = T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=2)
    B, L = 2, 16
else:
    config = T5Config(vocab_size=32128, d_model=1024, d_kv=64, d_ff=4096, num_layers=24, num_heads=16)
    B, L = 64, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = T5EncoderModel(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
embeddings = []
with torch.inference_mode():
    for i in range(3):
        ids = torch.randint(1, config.vocab_size, (B, L), device=device)
        mask = torch.ones_like(ids)
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        embeddings.append((hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True))
        del ids, mask, hidden
        if device == "cuda":
            print(
                f"batch {i} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
print(f"embeddings {len(embeddings)}")
