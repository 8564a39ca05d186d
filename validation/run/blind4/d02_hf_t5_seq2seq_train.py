"""HF T5ForConditionalGeneration from a small config, fp32, one Adam step on a seq2seq batch
(needs transformers)."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration

D, FF, LAYERS, HEADS, VOCAB, B, SRC, TGT = (
    (32, 64, 1, 2, 256, 2, 16, 8) if os.environ.get("SMOKE") else (512, 2048, 6, 8, 32128, 16, 512, 128)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(42)
config = T5Config(
    vocab_size=VOCAB,
    d_model=D,
    d_ff=FF,
    num_layers=LAYERS,
    num_heads=HEADS,
    d_kv=D // HEADS,
    use_cache=False,
    decoder_start_token_id=0,
    pad_token_id=0,
)
model = T5ForConditionalGeneration(config).to(device)
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
src = torch.randint(0, VOCAB, (B, SRC), device=device)
tgt = torch.randint(0, VOCAB, (B, TGT), device=device)
loss = model(input_ids=src, attention_mask=torch.ones_like(src), labels=tgt).loss
loss.backward()
opt.step()
opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(f"step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
