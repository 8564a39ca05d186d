"""PEFT DoRA (rank 32) on HF OLMo (v1: non-parametric layer norms, clip_qkv) built from a config:
12 layers of 1536 wide, 16 heads, a 50,304-symbol vocabulary, fp32 weights, eager attention, under
bf16 autocast; DoRA on the q/k/v/o projections and on the token embedding (a DoRA Embedding), the
rest frozen; AdamW with gradient accumulation over 2 micro-batches of 4 x 1,024 tokens with padded
labels, 2 optimizer steps, then a no_grad pass over a batch of 8 at 1,536 tokens; 4 phases."""

import os

import torch
from peft import LoraConfig, get_peft_model
from transformers import OlmoConfig, OlmoForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10904)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 50304
B, T = (2, 48) if SMALL else (4, 1024)
cfg = OlmoConfig(
    vocab_size=V,
    hidden_size=64 if SMALL else 1536,
    intermediate_size=128 if SMALL else 4096,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 16,
    clip_qkv=8.0,
    max_position_embeddings=2048,
    pad_token_id=1,
    eos_token_id=2,
    use_cache=False,
)
cfg._attn_implementation = "eager"
model = OlmoForCausalLM(cfg).to(device)
model = get_peft_model(
    model,
    LoraConfig(
        r=32,
        lora_alpha=64,
        lora_dropout=0.0,
        use_dora=True,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "embed_tokens"],
    ),
)
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-4)


def micro(b, t):
    ids = torch.randint(2, V, (b, t))
    lengths = torch.randint(t // 2, t + 1, (b,))
    mask = torch.arange(t)[None, :] < lengths[:, None]
    ids[~mask] = 1
    labels = ids.masked_fill(~mask, -100)
    return ids.to(device), mask.long().to(device), labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(2):
    for _ in range(2):
        ids, mask, labels = micro(B, T)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / 2
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, labels, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    ids, mask, labels = micro(2 * B, 3 * T // 2)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
if device == "cuda":
    print(
        f"eval {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
