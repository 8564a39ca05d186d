"""HF Gemma2ForCausalLM from a small Gemma2Config (1,024 wide, 8 layers alternating sliding-window
(512) and full attention, 8 query and 4 key/value heads of head_dim 128, query_pre_attn_scalar 128,
attention-logit soft-capping 50 and final-logit soft-capping 30, GeGLU 4,096, the 256,000-token
vocabulary tied), built with attn_implementation="eager" as Gemma 2 training recommends (the
soft-capping is applied to the materialised scores), the whole model in bf16: AdamW (lr 1e-4,
weight decay 0.0), labels=input_ids, batch 4 x 1,024, 2 steps each its own phase; an eval loss at
4 x 1,024 under no_grad with eager, then the same batch after model.set_attn_implementation("sdpa")
(no soft-capping on that path), each its own phase; then generate(): greedy with the default
dynamic cache (sliding layers keep their window) for 4 prompts of 640 and 64 new tokens, then
sampling (top-k 40, temperature 0.9) with cache_implementation="static" (compile disabled), 8
prompts of 96, 32 new tokens; 6 phases."""

import os

import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15803)
if SMALL:
    config = Gemma2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=16,
    )
    B, T, GB, GP, GN, SB, SP, SN = 2, 32, 2, 24, 4, 2, 8, 4
else:
    config = Gemma2Config(
        vocab_size=256000,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=128,
        query_pre_attn_scalar=128,
        sliding_window=512,
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        max_position_embeddings=4096,
    )
    B, T, GB, GP, GN, SB, SP, SN = 4, 1024, 4, 640, 64, 8, 96, 32
device = "cuda" if torch.cuda.is_available() else "cpu"

model = Gemma2ForCausalLM(config)
model.set_attn_implementation("eager")
model = model.to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    batch = torch.randint(0, config.vocab_size, (B, T), device=device)
    outputs = model(input_ids=batch, attention_mask=torch.ones_like(batch), labels=batch)
    outputs.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {outputs.loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del outputs

model.eval()
batch = torch.randint(0, config.vocab_size, (B, T), device=device)
for impl in ("eager", "sdpa"):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        loss = model(input_ids=batch, labels=batch).loss.item()
    if device == "cuda":
        print(
            f"eval {impl} {loss:.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del batch
prompts = torch.randint(0, config.vocab_size, (GB, GP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=GN,
        min_new_tokens=GN,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"greedy dynamic {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del gen
prompts = torch.randint(0, config.vocab_size, (SB, SP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=SN,
        min_new_tokens=SN,
        do_sample=True,
        top_k=40,
        temperature=0.9,
        cache_implementation="static",
        disable_compile=True,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"sampled static {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
