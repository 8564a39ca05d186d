"""HF Falcon-H1 (FalconH1ForCausalLM from config, bf16 weights): every layer runs GQA attention and a
Mamba-2 mixer side by side (mamba_d_ssm 1536, 24 heads of 64, d_state 128, chunk 128, torch path)
with Falcon-H1's muP multipliers, 1536 wide, 6 layers, vocab 65,536. Two training steps at batch 8 x
768 with foreach AdamW and bf16 autocast over the bf16 weights; then generate() with its
FalconHybridMambaAttentionDynamicCache: greedy 48 tokens from a 512-token prompt at batch 8, and a
beam search (4 beams) of 24 tokens at batch 2; 5 phases."""

import os

import torch
from transformers import FalconH1Config, FalconH1ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11602)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = FalconH1Config(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        mamba_d_ssm=64,
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_d_state=16,
        mamba_chunk_size=16,
    )
    B, T, P, NEW, BEAM_NEW = 2, 32, 16, 4, 3
else:
    config = FalconH1Config(
        vocab_size=65536,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=6,
        num_attention_heads=12,
        num_key_value_heads=4,
        mamba_d_ssm=1536,
        mamba_n_heads=24,
        mamba_d_head=64,
        mamba_d_state=128,
        mamba_chunk_size=128,
        embedding_multiplier=5.0,
        lm_head_multiplier=0.02,
        key_multiplier=0.5,
        mlp_multipliers=[0.9, 0.5],
        ssm_multipliers=[0.35, 0.25, 0.5, 0.5, 0.25],
    )
    B, T, P, NEW, BEAM_NEW = 8, 768, 512, 48, 24
config._attn_implementation = "sdpa"
model = FalconH1ForCausalLM(config).to(device=device, dtype=torch.bfloat16)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05, foreach=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
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
    del out, ids
model.eval()
prompt = torch.randint(0, config.vocab_size, (B, P), device=device)
with torch.inference_mode():
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
with torch.inference_mode():
    gen = model.generate(
        prompt[:2],
        attention_mask=torch.ones_like(prompt[:2]),
        max_new_tokens=BEAM_NEW,
        min_new_tokens=BEAM_NEW,
        num_beams=4,
        do_sample=False,
    )
if device == "cuda":
    print(
        f"beam {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
