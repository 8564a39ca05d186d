"""HF MegatronBertForPreTraining (pre-LayerNorm BERT, MLM plus next-sentence heads) built from its
config, 12 layers, 1,024 wide, a 29,056 vocabulary, fp32 weights under fp16 autocast with GradScaler,
8 x 512 sentence pairs (token types, 15% masked, NSP labels), AdamW, gradient accumulation over 2
micro-batches, 2 optimizer steps; 3 phases."""

import os

import torch
from transformers import MegatronBertConfig, MegatronBertForPreTraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8705)
if SMALL:
    config = MegatronBertConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=64,
    )
    B, L = 2, 16
else:
    config = MegatronBertConfig(num_hidden_layers=12)
    B, L = 8, 512
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MegatronBertForPreTraining(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _micro in range(2):
        ids = torch.randint(5, config.vocab_size, (B, L), device=device)
        types = (torch.arange(L, device=device) >= L // 2).long().expand(B, L)
        mask = torch.rand(B, L, device=device) < 0.15
        labels = torch.where(mask, ids, torch.full_like(ids, -100))
        nsp = torch.randint(0, 2, (B,), device=device)
        with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
            out = model(
                input_ids=ids.masked_fill(mask, 4),
                token_type_ids=types,
                labels=labels,
                next_sentence_label=nsp,
            )
        scaler.scale(out.loss / 2).backward()
        del ids, types, mask, labels, nsp
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out
