"""HF MambaForCausalLM built from a small MambaConfig (768 wide, 8 layers, state 16, conv 4,
expand 2, vocabulary 50,280, tied embeddings) and trained on its torch path (no mamba_ssm or
causal_conv1d: the slow forward's sequential selective scan over every position, the discretised
A and B made for the whole sequence first), the whole model in bf16: AdamW (weight decay 0.1, no
decay on A_log, D, norms and biases), a cosine schedule with warmup from get_cosine_schedule_with_warmup,
labels=input_ids, gradient clipping at 1.0, batch 8 x 256, 2 steps (each its own phase); a
held-out loss at batch 16 x 512 under no_grad; then generate() with the model's recurrent cache:
greedy, 48 new tokens for 16 prompts of 128, and nucleus sampling (top_p 0.9, temperature 0.8),
2 return sequences for 8 prompts of 64, 32 new tokens; 6 phases."""

import os

import torch
from transformers import MambaConfig, MambaForCausalLM, get_cosine_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15606)
if SMALL:
    config = MambaConfig(vocab_size=256, hidden_size=32, state_size=4, num_hidden_layers=2, expand=2)
    B, T, EVAL_B, EVAL_T, G_B, G_P, G_N, S_B, S_P, S_N = 2, 16, 2, 16, 2, 8, 4, 2, 8, 4
else:
    config = MambaConfig(
        vocab_size=50280, hidden_size=768, state_size=16, num_hidden_layers=8, expand=2, conv_kernel=4
    )
    B, T, EVAL_B, EVAL_T, G_B, G_P, G_N, S_B, S_P, S_N = 8, 256, 16, 512, 16, 128, 48, 8, 64, 32
device = "cuda" if torch.cuda.is_available() else "cpu"

model = MambaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
no_decay = ("A_log", "D", "norm", "bias")
groups = [
    {
        "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
        "weight_decay": 0.1,
    },
    {
        "params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
        "weight_decay": 0.0,
    },
]
opt = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95))
sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=10, num_training_steps=1000)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()

del loss, ids
model.eval()
with torch.no_grad():
    ids = torch.randint(0, config.vocab_size, (EVAL_B, EVAL_T), device=device)
    val = model(input_ids=ids, labels=ids).loss.item()
if device == "cuda":
    print(f"val {val:.4f} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

prompts = torch.randint(0, config.vocab_size, (G_B, G_P), device=device)
with torch.no_grad():
    out = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=G_N,
        min_new_tokens=G_N,
        do_sample=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"greedy {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del out
prompts = torch.randint(0, config.vocab_size, (S_B, S_P), device=device)
with torch.no_grad():
    out = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=S_N,
        min_new_tokens=S_N,
        do_sample=True,
        top_p=0.9,
        top_k=0,
        temperature=0.8,
        num_return_sequences=2,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"sampled {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
