"""A Zamba (v1) hybrid from ZambaConfig (1,024 wide, 12 Mamba layers with 2 Mamba heads, d_state 16,
one shared attention + MLP block applied at layers 4 and 10 over the concatenation of the hidden
state and the original embeddings, vocabulary 32,000, bf16 weights, SDPA, use_mamba_kernels=False so
the selective scan is transformers' sequential Python loop) trained with reentrant gradient
checkpointing: batches of 8 x 256, AdamW (foreach) over bf16 parameters, 2 steps; then greedy
generation of 32 tokens for 2 prompts of 128 through ZambaHybridDynamicCache under no_grad; 3 phases."""

import os

import torch
from transformers import ZambaConfig, ZambaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13003)
if SMALL:
    cfg = ZambaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=4,
        attn_layer_period=3,
        attn_layer_offset=1,
        n_mamba_heads=2,
        max_position_embeddings=256,
        use_mamba_kernels=False,
    )
    B, T, P, NEW = 2, 16, 8, 4
else:
    cfg = ZambaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=16,
        attn_layer_period=6,
        attn_layer_offset=4,
        n_mamba_heads=2,
        mamba_d_state=16,
        max_position_embeddings=2048,
        use_mamba_kernels=False,
    )
    B, T, P, NEW = 8, 256, 128, 32
cfg._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"

model = ZambaForCausalLM(cfg).to(device, torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.1, betas=(0.9, 0.95))

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
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, out

model.gradient_checkpointing_disable()
model.eval()
with torch.no_grad():
    prompts = torch.randint(3, cfg.vocab_size, (2, P), device=device)
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        use_cache=True,
    )
if device == "cuda":
    print(
        f"generated {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
else:
    print(f"smoke generated {tuple(gen.shape)}")
