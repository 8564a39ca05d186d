"""HF Bamba (BambaForCausalLM from config, bf16 weights): a hybrid of Mamba-2 mixers (32 heads of
64, d_state 64, chunk 128, run by the model's torch path: no mamba_ssm kernels) and GQA attention at
layers 3 and 7 of 8, 1024 wide, vocab 128,000. Training at batch 4 x 512 with non-reentrant gradient
checkpointing and fused AdamW, 3 steps; then greedy generate() of 32 tokens from a 256-token prompt
at batch 4 with its HybridMambaAttentionDynamicCache, and a second one with sampling; 6 phases."""

import os

import torch
from transformers import BambaConfig, BambaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11601)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = BambaConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        attn_layer_indices=[1],
        mamba_n_heads=4,
        mamba_d_state=16,
        mamba_chunk_size=16,
    )
    B, T, P, NEW = 2, 32, 16, 4
else:
    config = BambaConfig(
        vocab_size=128000,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        attn_layer_indices=[3, 7],
        mamba_n_heads=32,
        mamba_d_state=64,
        mamba_chunk_size=128,
    )
    B, T, P, NEW = 4, 512, 256, 32
config._attn_implementation = "sdpa"
model = BambaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), fused=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids
model.eval()
prompt = torch.randint(0, config.vocab_size, (B, P), device=device)
with torch.no_grad():
    gen = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
if device == "cuda":
    print(
        f"greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen
with torch.no_grad():
    gen = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=True,
        top_k=50,
    )
if device == "cuda":
    print(
        f"sample {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
