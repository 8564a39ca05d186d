"""HF Qwen2MoeForCausalLM from a Qwen2MoeConfig (768 wide, 12 layers with `decoder_sparse_step=2`:
every second layer's MLP is a sparse block of 32 routed experts of width 512 with top-4 routing and
the gates renormalised (`norm_topk_prob=True`) plus a sigmoid-gated shared expert of width 2,048, the
others dense MLPs of width 2,048; GQA 12/4 with qkv bias, 64,000 vocabulary, the router's aux loss
at 0.01; transformers' default experts implementation), fp32 weights under bf16 autocast, AdamW
with the for-loop implementation (`foreach=False`), gradients clipped at 1.0, batch 4 x 1,024, 3
steps; then nucleus sampling under bf16 autocast (top_p 0.9, temperature 0.8, 2 returned sequences
for each of 4 prompts of 128 tokens, exactly 32 new tokens); 5 phases."""

import os

import torch
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(14705)
if SMALL:
    config = Qwen2MoeConfig(
        vocab_size=300,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_experts=4,
        num_experts_per_tok=2,
        decoder_sparse_step=2,
        norm_topk_prob=True,
        output_router_logits=True,
        router_aux_loss_coef=0.01,
    )
    B, T, GB, PROMPT, NEW = 2, 16, 2, 8, 4
else:
    config = Qwen2MoeConfig(
        vocab_size=64000,
        hidden_size=768,
        intermediate_size=2048,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        num_experts=32,
        num_experts_per_tok=4,
        decoder_sparse_step=2,
        norm_topk_prob=True,
        output_router_logits=True,
        router_aux_loss_coef=0.01,
        max_position_embeddings=4096,
    )
    B, T, GB, PROMPT, NEW = 4, 1024, 4, 128, 32
device = "cuda" if torch.cuda.is_available() else "cpu"
model = Qwen2MoeForCausalLM(config).to(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01, foreach=False)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(3):
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {out.loss.item():.3f} aux {out.aux_loss.item():.4f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del out, ids

model.eval()
prompts = torch.randint(0, config.vocab_size, (GB, PROMPT), device=device)
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_p=0.9,
        temperature=0.8,
        num_return_sequences=2,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        output_router_logits=False,
        pad_token_id=0,
    )
if device == "cuda":
    print(
        f"generate {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
