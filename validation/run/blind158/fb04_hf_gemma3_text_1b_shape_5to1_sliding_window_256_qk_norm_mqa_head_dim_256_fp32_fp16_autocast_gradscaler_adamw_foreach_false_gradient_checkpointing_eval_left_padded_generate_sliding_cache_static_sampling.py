"""HF Gemma3ForCausalLM from a small Gemma3TextConfig shaped like Gemma 3 1B but shallower (1,152
wide, 8 layers with the 5-sliding-to-1-full pattern at a sliding window of 256, 4 query heads and
1 key/value head of head_dim 256 with q/k RMSNorm, GeGLU 6,912, the 262,144-token vocabulary tied,
sdpa attention), fp32 weights trained under fp16 autocast with a GradScaler (AdamW with
foreach=False, weight decay 0.05), gradient checkpointing through gradient_checkpointing_enable()
(use_reentrant=False), labels with the padded positions set to -100, batch 4 x 1,024 with a
right-padded row, 2 steps each its own phase (unscale, clip at 1.0, scaler.step/update); an
eval loss in fp16 autocast at 4 x 1,024 under no_grad; then the model in bf16 for generate():
greedy for 4 left-padded prompts of up to 512 (beyond the window) and 64 new tokens with the default
dynamic cache, then sampling (top-p 0.9) with cache_implementation="static" (compile disabled)
for 6 prompts of 128, 2 return sequences, 40 new tokens; 5 phases."""

import os

import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15804)
if SMALL:
    config = Gemma3TextConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=16,
    )
    B, T, GB, GP, GN, SB, SP, SN = 2, 48, 2, 32, 4, 2, 8, 4
else:
    config = Gemma3TextConfig(
        vocab_size=262144,
        hidden_size=1152,
        intermediate_size=6912,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        query_pre_attn_scalar=256,
        sliding_window=256,
        max_position_embeddings=8192,
    )
    B, T, GB, GP, GN, SB, SP, SN = 4, 1024, 4, 512, 64, 6, 128, 40
device = "cuda" if torch.cuda.is_available() else "cpu"

model = Gemma3ForCausalLM(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.05, foreach=False)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    input_ids = torch.randint(1, config.vocab_size, (B, T), device=device)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[-1, T * 3 // 4 :] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, config.pad_token_id)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} scale {scaler.get_scale()}"
            f" peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del loss

model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
    ids = torch.randint(1, config.vocab_size, (B, T), device=device)
    val = model(input_ids=ids, labels=ids).loss.item()
if device == "cuda":
    print(f"val {val:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt, scaler, ids
model.gradient_checkpointing_disable()
model = model.to(torch.bfloat16)
lengths = [GP, GP * 3 // 4, GP // 2, GP // 4]
prompts = torch.full((GB, GP), config.pad_token_id, dtype=torch.long, device=device)
mask = torch.zeros((GB, GP), dtype=torch.long, device=device)
for i, n in enumerate(lengths[:GB]):
    prompts[i, GP - n :] = torch.randint(1, config.vocab_size, (n,), device=device)
    mask[i, GP - n :] = 1
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=mask,
        max_new_tokens=GN,
        min_new_tokens=GN,
        do_sample=False,
        pad_token_id=config.pad_token_id,
    )
if device == "cuda":
    print(
        f"greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del gen
prompts = torch.randint(1, config.vocab_size, (SB, SP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=SN,
        min_new_tokens=SN,
        do_sample=True,
        top_p=0.9,
        top_k=0,
        num_return_sequences=2,
        cache_implementation="static",
        disable_compile=True,
        pad_token_id=config.pad_token_id,
    )
if device == "cuda":
    print(
        f"sampled static {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
