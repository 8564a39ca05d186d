"""A small Mixtral built locally from transformers' MixtralConfig, trained with its aux loss, then sampled.

Model: MixtralForCausalLM from MixtralConfig(vocab 32,000, hidden 1,024, intermediate 2,048, 6 layers, 16
attention heads with 8 key/value heads, 8 local experts, 2 experts per token, router_aux_loss_coef 0.02,
output_router_logits=True, SDPA attention), random initialisation, nothing downloaded.

Training: fp32 weights under bf16 autocast, AdamW(fused=True, lr 3e-4, weight decay 0.1) with a linear
warmup (LambdaLR), gradient checkpointing through model.gradient_checkpointing_enable(), batch 8 x 1,024
random tokens with labels = input_ids (the loss includes the aux loss). Then a no_grad loss at batch 16, and
generation: the optimizer dropped, the model cast with .to(torch.bfloat16), greedy generate() (router logits
off) of 16 new tokens (min_new_tokens=16) from 16 prompts of 128 tokens with the KV cache. Phases: the first
step; 2 more steps; the no_grad loss; generate(). 4 phases."""

import os

import torch
from transformers import MixtralConfig, MixtralForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(7)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    cfg = dict(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, T, PROMPT = 2, 32, 8
else:
    cfg = dict(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2048,
        num_hidden_layers=6,
        num_attention_heads=16,
        num_key_value_heads=8,
    )
    B, T, PROMPT = 8, 1024, 128

config = MixtralConfig(
    **cfg,
    num_local_experts=8,
    num_experts_per_tok=2,
    router_aux_loss_coef=0.02,
    output_router_logits=True,
    max_position_embeddings=4096,
    attn_implementation="sdpa",
)
model = MixtralForCausalLM(config).to(device)
model.gradient_checkpointing_enable()
model.config.use_cache = False
print(f"parameters: {model.num_parameters() / 1e6:.1f}M")

opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=device == "cuda")
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 100))


def train_step():
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()  # noqa: F821 (deleted before generate(), which does not train)
    sched.step()  # noqa: F821
    opt.zero_grad(set_to_none=True)  # noqa: F821
    return out.loss.item(), out.aux_loss.item()


model.train()
loss, aux = train_step()
print(f"step 0 loss {loss:.4f} aux {aux:.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

for step in (1, 2):
    loss, aux = train_step()
    print(f"step {step} loss {loss:.4f} aux {aux:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    ids = torch.randint(0, config.vocab_size, (2 * B, T), device=device)
    eval_loss = model(input_ids=ids, labels=ids).loss.item()
print(f"eval loss {eval_loss:.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")
    torch.cuda.reset_peak_memory_stats()

del opt, sched
model.to(torch.bfloat16)
model.config.use_cache = True
model.config.output_router_logits = False  # the aux loss over a 1-token step does not match the mask
prompts = torch.randint(0, config.vocab_size, (2 * B, PROMPT), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=16,
        min_new_tokens=16,
        do_sample=False,
        pad_token_id=0,
    )
print(f"generated {tuple(gen.shape)}")
if device == "cuda":
    peak = torch.cuda.max_memory_allocated()
    print(f"generate peak {peak / 2**30:.2f} GiB, allocated {torch.cuda.memory_allocated()}")
