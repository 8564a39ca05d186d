"""A MiniMax-Text-01-style hybrid from MiniMaxConfig (1,024 wide, 8 layers: three lightning
linear-attention layers to each softmax-attention layer, 16 heads with 4 KV heads of 64, sparse MoE
of 8 experts of 1,024 with top-2 routing, router jitter off, vocabulary 32,000, bf16 weights, SDPA)
whose lightning attention is transformers' block loop (256-token blocks: intra-block decayed
attention, inter-block key-value state) trained with the router's load-balancing loss
(output_router_logits): batches of 4 x 1,024, fused AdamW, 2 steps; then greedy generation of 32
tokens for 4 prompts of 256 under no_grad (linear layers decode through their recurrent state);
3 phases."""

import os

import torch
from transformers import MiniMaxConfig, MiniMaxForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13005)
types = ["linear_attention", "linear_attention", "linear_attention", "full_attention"]
if SMALL:
    cfg = MiniMaxConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_local_experts=4,
        num_experts_per_tok=2,
        layer_types=types,
        block_size=16,
        max_position_embeddings=512,
        output_router_logits=True,
    )
    B, T, P, NEW = 2, 40, 20, 4
else:
    cfg = MiniMaxConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=1024,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        num_local_experts=8,
        num_experts_per_tok=2,
        layer_types=types * 2,
        block_size=256,
        max_position_embeddings=8192,
        output_router_logits=True,
    )
    B, T, P, NEW = 4, 1024, 256, 32
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"

model = MiniMaxForCausalLM(cfg).to(device, torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")

if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(2):
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out

model.eval()
with torch.no_grad():
    prompts = torch.randint(3, cfg.vocab_size, (4, P), device=device)
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        use_cache=True,
        output_router_logits=False,
    )
if device == "cuda":
    print(
        f"generated {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke generated {tuple(gen.shape)}")
