"""HF GraniteMoeHybrid (GraniteMoeHybridForCausalLM from config, Granite-4.0-style, bf16 weights):
Mamba-2 layers (torch path: 32 heads of 48, d_state 128, chunk 256) with an attention layer every
fourth, each followed by a 16-expert top-2 MoE and a shared expert, 768 wide, 12 layers, no position
embedding, vocab 49,160, Granite's multipliers. Training at batch 8 x 512 with reentrant gradient
checkpointing, Adam (foreach) and norm clipping, 3 steps; then greedy
generate() of 40 tokens from a 384-token prompt, left-padded, at batch 6; 5 phases."""

import os

import torch
from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11603)
device = "cuda" if torch.cuda.is_available() else "cpu"
LAYERS = 4 if SMALL else 12
types = ["attention" if i % 4 == 3 else "mamba" for i in range(LAYERS)]
if SMALL:
    config = GraniteMoeHybridConfig(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=32,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        shared_intermediate_size=64,
        layer_types=types,
        mamba_n_heads=4,
        mamba_d_head=32,
        mamba_d_state=16,
        mamba_chunk_size=16,
    )
    B, T, P, NEW = 2, 32, 16, 4
else:
    config = GraniteMoeHybridConfig(
        vocab_size=49160,
        hidden_size=768,
        intermediate_size=512,
        num_hidden_layers=LAYERS,
        num_attention_heads=12,
        num_key_value_heads=4,
        num_local_experts=16,
        num_experts_per_tok=2,
        shared_intermediate_size=1024,
        layer_types=types,
        mamba_n_heads=32,
        mamba_d_head=48,
        mamba_d_state=128,
        mamba_chunk_size=256,
        embedding_multiplier=12.0,
        logits_scaling=3.0,
        residual_multiplier=0.22,
        attention_multiplier=0.0078125,
    )
    B, T, P, NEW = 8, 512, 384, 40
config._attn_implementation = "sdpa"
model = GraniteMoeHybridForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": True})
model.enable_input_require_grads()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=True)
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
prompt = torch.randint(0, config.vocab_size, (6, P), device=device)
mask = torch.ones_like(prompt)
for i in range(6):
    mask[i, : (P // 24) * i] = 0
prompt = prompt.masked_fill(mask == 0, 0)
with torch.no_grad():
    gen = model.generate(
        prompt, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False, pad_token_id=0
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen, prompt, mask
optimizer.state.clear()
if device == "cuda":
    torch.cuda.empty_cache()
    print(f"end allocated {torch.cuda.memory_allocated()}", f"reserved {torch.cuda.memory_reserved()}")
