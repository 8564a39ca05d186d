"""HF transformers CodeGen (fused qkv projection split in mp_num=4 blocks, partial rotary over 32 of
64 head dims, attention scores in fp32, parallel attention/MLP residual) built from a config at 8
layers, 1,024 wide, 16 heads, vocabulary 50,400, fp32 weights trained under fp16 autocast with a
GradScaler and AdamW, batch 4 x 1,024 tokens with gradient clipping on the unscaled gradients,
3 steps, then an eval forward under no_grad; 5 phases."""

import os

import torch
from transformers import CodeGenConfig, CodeGenForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9302)
if SMALL:
    cfg = CodeGenConfig(
        vocab_size=128,
        n_embd=64,
        n_layer=2,
        n_head=4,
        rotary_dim=8,
        n_positions=64,
        n_ctx=64,
        bos_token_id=0,
        eos_token_id=0,
    )
    B, L = 2, 16
else:
    cfg = CodeGenConfig(
        vocab_size=50400, n_embd=1024, n_layer=8, n_head=16, rotary_dim=32, n_positions=2048, n_ctx=2048
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
model = CodeGenForCausalLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    with torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=ids, labels=ids).loss
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} scale {scaler.get_scale():.0f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16, enabled=device == "cuda"):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    nxt = model(input_ids=ids).logits[:, -1].argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(nxt.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
