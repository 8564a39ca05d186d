"""HF transformers DBRX (fine-grained MoE: 8 experts with top-2 routing and normalised expert
weights, fused Wqkv with clip_qkv=8, grouped-query attention with 4 KV heads, LayerNorm without
bias) built from a config at 4 layers, 1,024 wide, 16 heads, expert FFN 1,536, vocabulary 32,000,
in bf16 weights with foreach AdamW (rope_theta given in attn_config, where DbrxAttention reads it),
batch 4 x 1,024 tokens, 3 steps, then an eval forward under no_grad; 5 phases."""

import os

import torch
from transformers import DbrxConfig, DbrxForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9304)
if SMALL:
    cfg = DbrxConfig(
        d_model=64,
        n_heads=4,
        n_layers=2,
        max_seq_len=64,
        vocab_size=128,
        attn_config={"kv_n_heads": 2, "clip_qkv": 8.0, "rope_theta": 500000.0},
        ffn_config={"ffn_hidden_size": 96, "moe_num_experts": 4, "moe_top_k": 2},
    )
    B, L = 2, 16
else:
    cfg = DbrxConfig(
        d_model=1024,
        n_heads=16,
        n_layers=4,
        max_seq_len=2048,
        vocab_size=32000,
        attn_config={"kv_n_heads": 4, "clip_qkv": 8.0, "rope_theta": 500000.0},
        ffn_config={"ffn_hidden_size": 1536, "moe_num_experts": 8, "moe_top_k": 2},
    )
    B, L = 4, 1024
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
model = DbrxForCausalLM(cfg).to(device=device, dtype=dtype)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out
model.eval()
with torch.no_grad():
    ids = torch.randint(0, cfg.vocab_size, (B, L), device=device)
    top = model(input_ids=ids).logits[:, -1].topk(8, dim=-1).indices
if device == "cuda":
    print(
        f"eval {tuple(top.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
