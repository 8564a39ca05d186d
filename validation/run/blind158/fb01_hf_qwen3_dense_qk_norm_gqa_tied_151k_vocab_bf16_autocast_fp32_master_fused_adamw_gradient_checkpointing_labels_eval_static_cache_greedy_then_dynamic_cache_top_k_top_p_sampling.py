"""HF Qwen3ForCausalLM from a small Qwen3Config (1,024 wide, 12 layers, 16 query heads and 8
key/value heads of head_dim 128 with the per-head q/k RMSNorm, SwiGLU 3,072, the real 151,936-token
vocabulary, tied embeddings, sdpa attention), fp32 weights trained under bf16 autocast with fused
AdamW (weight decay 0.1 on matrices only) and a linear warmup schedule, gradient checkpointing
(use_reentrant=False) and labels=input_ids, batch 8 x 512, 2 steps each its own phase with
clipping at 1.0; a held-out loss in eval mode at batch 8 x 1,024 under no_grad and autocast; the model
cast to bf16 for serving, then generate(): greedy with cache_implementation="static" (compile
disabled) for 8 prompts of 256 and 64 new tokens, then top-k 50 / top-p 0.95 sampling at
temperature 0.7 with the default dynamic cache, 4 prompts of 128, 3 return sequences, 48 new tokens;
6 phases."""

import os

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15801)
if SMALL:
    config = Qwen3Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )
    B, T, EB, ET, GB, GP, GN, SB, SP, SN = 2, 32, 2, 32, 2, 16, 4, 2, 8, 4
else:
    config = Qwen3Config(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    B, T, EB, ET, GB, GP, GN, SB, SP, SN = 8, 512, 8, 1024, 8, 256, 64, 4, 128, 48
device = "cuda" if torch.cuda.is_available() else "cpu"

model = Qwen3ForCausalLM(config).to(device)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=3e-4,
    betas=(0.9, 0.95),
    fused=device == "cuda",
)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=100, num_training_steps=10000)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    input_ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=input_ids, labels=input_ids)
    out.loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    loss = out.loss.item()
    del out
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss:.4f} gn {gn.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    input_ids = torch.randint(0, config.vocab_size, (EB, ET), device=device)
    val = model(input_ids=input_ids, labels=input_ids).loss.item()
if device == "cuda":
    print(f"val {val:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del opt, sched, decay, no_decay
model.gradient_checkpointing_disable()
model = model.to(torch.bfloat16)
prompts = torch.randint(0, config.vocab_size, (GB, GP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=GN,
        min_new_tokens=GN,
        do_sample=False,
        cache_implementation="static",
        disable_compile=True,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"static greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
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
        top_k=50,
        top_p=0.95,
        temperature=0.7,
        num_return_sequences=3,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"sampled {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
