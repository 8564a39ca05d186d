"""HF ReformerModelWithLMHead (local and LSH attention layers alternating, reversible residual
layers that recompute activations in backward, axial position embeddings, chunked feed-forward)
built from its config, fp32, Adam, batch 4 of 4,096 tokens, 2 steps; 3 phases."""

import os

import torch
from transformers import ReformerConfig, ReformerModelWithLMHead

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7404)
if SMALL:
    config = ReformerConfig(
        vocab_size=64,
        hidden_size=32,
        attention_head_size=8,
        num_attention_heads=2,
        attn_layers=["local", "lsh"],
        axial_pos_shape=(4, 8),
        axial_pos_embds_dim=(16, 16),
        feed_forward_size=64,
        local_attn_chunk_length=8,
        lsh_attn_chunk_length=8,
        num_buckets=4,
        num_hashes=2,
        chunk_size_feed_forward=8,
        is_decoder=True,
        max_position_embeddings=32,
        hidden_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
        local_attention_probs_dropout_prob=0.0,
    )
    B, L = 2, 32
else:
    config = ReformerConfig(
        vocab_size=320,
        hidden_size=512,
        attention_head_size=64,
        num_attention_heads=8,
        attn_layers=["local", "lsh", "local", "lsh", "local", "lsh"],
        axial_pos_shape=(64, 64),
        axial_pos_embds_dim=(128, 384),
        feed_forward_size=2048,
        local_attn_chunk_length=128,
        lsh_attn_chunk_length=128,
        num_buckets=32,
        num_hashes=2,
        chunk_size_feed_forward=1024,
        is_decoder=True,
        max_position_embeddings=4096,
    )
    B, L = 4, 4096
device = "cuda" if torch.cuda.is_available() else "cpu"
model = ReformerModelWithLMHead(config).to(device).train()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, L), device=device)
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    del ids, loss
    if device == "cuda":
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
