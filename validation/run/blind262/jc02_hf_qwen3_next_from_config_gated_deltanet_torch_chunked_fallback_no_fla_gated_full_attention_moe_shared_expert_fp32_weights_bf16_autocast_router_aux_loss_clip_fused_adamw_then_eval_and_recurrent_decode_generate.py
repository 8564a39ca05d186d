"""HF Qwen3-Next training without flash-linear-attention (the GPU machine has torch, transformers,
peft, timm, torchvision only): transformers falls back to its reference PyTorch chunked gated delta
rule (chunk 64, per-chunk Python loop) and causal conv1d for the gated DeltaNet layers, and to the
recurrent delta rule and conv1d update when decoding. Qwen3NextForCausalLM from a config (random
weights): 8 layers of 1024, three DeltaNet layers (8 key heads / 16 value heads of 64, conv kernel 4)
then one gated full-attention layer (8 heads of 128, 2 KV heads, partial rotary), repeated; every
layer a sparse MoE of 32 experts (top 4, 512 wide) plus a gated shared expert (512); vocabulary
32,000.
Phase 1: fp32 weights, bf16 autocast, the router load-balancing loss (output_router_logits in the
forward call), gradient clipping at 1.0, fused AdamW, batch 2 x 2048, 2 steps. Phase 2: eval under
no_grad at batch 4 x 1024 (autocast). Phase 3: the model cast to bf16 (optimizer state dropped),
greedy generate() of 40 tokens from 2 prompts of 1024 tokens under inference_mode. 3 phases after
the model's."""

import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

torch.manual_seed(26202)
V = 32000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen3NextConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=128,
    linear_num_key_heads=8,
    linear_num_value_heads=16,
    linear_key_head_dim=64,
    linear_value_head_dim=64,
    linear_conv_kernel_dim=4,
    num_experts=32,
    num_experts_per_tok=4,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    router_aux_loss_coef=0.001,
    max_position_embeddings=8192,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
model = Qwen3NextForCausalLM(cfg).cuda()
report("model_fp32")

opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
model.train()
for _ in range(2):
    ids = torch.randint(3, V, (2, 2048), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=ids, output_router_logits=True)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, ids
report("train_bf16_autocast_aux_loss_fused_adamw")

model.eval()
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids = torch.randint(3, V, (4, 1024), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    del ids, loss
report("eval_no_grad_autocast")

del opt
model.to(torch.bfloat16)
with torch.inference_mode():
    prompt = torch.randint(3, V, (2, 1024), device="cuda")
    out = model.generate(
        prompt, max_new_tokens=40, min_new_tokens=40, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    del out, prompt
report("bf16_generate_recurrent_decode")
