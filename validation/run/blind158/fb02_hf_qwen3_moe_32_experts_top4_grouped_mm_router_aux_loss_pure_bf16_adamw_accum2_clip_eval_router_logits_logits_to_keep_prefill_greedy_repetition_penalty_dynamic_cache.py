"""HF Qwen3MoeForCausalLM from a small Qwen3MoeConfig (1,024 wide, 8 layers, 16 query and 4
key/value heads of head_dim 64, 32 routed experts of intermediate 512 with 4 active per token and
normalised top-k probabilities, every layer sparse, the 151,936-token vocabulary untied), the whole
model in bf16 with the default experts implementation, output_router_logits=True so the loss carries
the load-balancing term (coefficient 0.001): AdamW (foreach, weight decay 0.01), 2 optimizer steps
of 2 accumulated micro-batches of 4 x 512 each (one phase per step) with clipping at 1.0; an eval
forward at 8 x 512 reporting the loss and the aux loss under inference_mode; a long-prompt scoring
prefill at 4 x 2,048 with logits_to_keep=1 under no_grad; then generate(): greedy with a repetition
penalty of 1.2 and the default dynamic cache (output_router_logits turned off first), 8 prompts
of 192, 48 new tokens; 5 phases."""

import os

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(15802)
if SMALL:
    config = Qwen3MoeConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8,
        num_experts_per_tok=2,
        output_router_logits=True,
    )
    MB, T, EB, LB, LT, GB, GP, GN = 2, 32, 2, 2, 64, 2, 16, 4
else:
    config = Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        moe_intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        num_experts=32,
        num_experts_per_tok=4,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        output_router_logits=True,
        router_aux_loss_coef=0.001,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
    )
    MB, T, EB, LB, LT, GB, GP, GN = 4, 512, 8, 4, 2048, 8, 192, 48
device = "cuda" if torch.cuda.is_available() else "cpu"

model = Qwen3MoeForCausalLM(config).to(device=device, dtype=torch.bfloat16)
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

ACCUM = 2
model.train()
for step in range(2):
    for _micro in range(ACCUM):
        input_ids = torch.randint(0, config.vocab_size, (MB, T), device=device)
        out = model(input_ids=input_ids, labels=input_ids)
        (out.loss / ACCUM).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    opt.step()
    opt.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
        print(
            f"step {step} loss {out.loss.item():.4f} aux {out.aux_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out

model.eval()
with torch.inference_mode():
    input_ids = torch.randint(0, config.vocab_size, (EB, T), device=device)
    out = model(input_ids=input_ids, labels=input_ids)
    val, aux = out.loss.item(), out.aux_loss.item()
    del out
if device == "cuda":
    print(
        f"val {val:.4f} aux {aux:.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    long_ids = torch.randint(0, config.vocab_size, (LB, LT), device=device)
    last = model(input_ids=long_ids, logits_to_keep=1, use_cache=False).logits
    scores = torch.log_softmax(last.float(), dim=-1).max(-1).values
if device == "cuda":
    print(
        f"prefill {tuple(last.shape)} {scores.mean().item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del last, scores, long_ids
model.config.output_router_logits = False  # the aux loss is a training term; generate() trips on it
prompts = torch.randint(0, config.vocab_size, (GB, GP), device=device)
with torch.no_grad():
    gen = model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=GN,
        min_new_tokens=GN,
        do_sample=False,
        repetition_penalty=1.2,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
