"""HF MixtralForCausalLM from a small MixtralConfig (1,024 wide, 8 layers, GQA 16/8, 8 experts of
width 3,584 with top-2 routing, a 1,024-token sliding window, router jitter noise 0.01 and the
load-balancing loss at 0.02 by `output_router_logits=True`; transformers' default experts
implementation), bf16 weights, non-reentrant gradient checkpointing, AdamW (foreach, weight decay 0.1,
no decay on norms), batch 4 x 2,048 with `labels=input_ids`, 2 steps; then greedy generation of
exactly 48 new tokens for 8 left-padded prompts of up to 256 tokens with the KV cache (router logits
off: the aux loss does not take the decode steps' shapes); 4 phases."""

import os

import torch
from transformers import MixtralConfig, MixtralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14704)
D, FF, LAYERS, HEADS, KV, VOCAB, B, T, GB, PROMPT, NEW = (
    (64, 128, 2, 4, 2, 300, 2, 32, 2, 8, 4) if SMALL else (1024, 3584, 8, 16, 8, 32000, 4, 2048, 8, 256, 48)
)
device = "cuda" if torch.cuda.is_available() else "cpu"

config = MixtralConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    intermediate_size=FF,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    num_key_value_heads=KV,
    num_local_experts=8,
    num_experts_per_tok=2,
    max_position_embeddings=4096,
    sliding_window=T // 2,
    router_jitter_noise=0.01,
    output_router_logits=True,
    router_aux_loss_coef=0.02,
    pad_token_id=0,
    tie_word_embeddings=False,
)
model = MixtralForCausalLM(config).to(device=device, dtype=torch.bfloat16)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
opt = torch.optim.AdamW(
    [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
    lr=2e-4,
    betas=(0.9, 0.95),
)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(2):
    ids = torch.randint(1, VOCAB, (B, T), device=device)
    out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids

model.eval()
model.gradient_checkpointing_disable()
lengths = torch.linspace(PROMPT // 2, PROMPT, GB).long().tolist()
ids = torch.zeros(GB, PROMPT, dtype=torch.long, device=device)
mask = torch.zeros(GB, PROMPT, dtype=torch.long, device=device)
for i, n in enumerate(lengths):
    ids[i, PROMPT - n :] = torch.randint(3, VOCAB, (n,), device=device)
    mask[i, PROMPT - n :] = 1
with torch.no_grad():
    gen = model.generate(
        input_ids=ids,
        attention_mask=mask,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
        use_cache=True,
        output_router_logits=False,
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
