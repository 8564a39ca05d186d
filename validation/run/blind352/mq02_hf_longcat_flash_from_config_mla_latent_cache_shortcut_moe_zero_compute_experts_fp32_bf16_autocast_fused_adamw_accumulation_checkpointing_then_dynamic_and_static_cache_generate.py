"""HF LongCat-Flash (LongcatFlashForCausalLM from a LongcatFlashConfig, random weights, fp32 weights,
sdpa): 4 logical layers of 1024, each two attention sublayers and two dense MLPs (2,816) plus one
shortcut-connected MoE whose output joins the second sublayer's residual; multi-head latent attention
(16 heads, q LoRA 384, kv LoRA 256, 64 no-rope + 32 rope query/key dims, values 64, the LoRA scales),
its cache holding the kv latent and the rope key, expanded to full keys/values every call; the MoE
routes each token to 4 of 16 real experts (512) plus 8 zero-computation identity experts (softmax
router with a correction bias, routed scaling 6), looping over the experts hit; vocabulary 32,000.

Phase 1: two optimizer steps, each of 2 accumulated micro-batches of 2 x 1024 under bf16 autocast,
HF non-reentrant gradient checkpointing, AdamW(fused=True), clip_grad_norm_ 1.0. Phase 2: eval forward
1 x 2048 under inference_mode with logits_to_keep=1. Phase 3: greedy generate() of 64 new tokens
(min == max) from 4 prompts of 256 under bf16 autocast with the default dynamic cache. Phase 4: the
same with cache_implementation="static" (StaticCache layers of the whole length, allocated at the
first update; disable_compile=True so no torch.compile of the decoding step). Seeded; routing depends
on values (random weights), no other size does."""

import torch
from transformers import LongcatFlashConfig, LongcatFlashForCausalLM

torch.manual_seed(35202)
V = 32000


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = LongcatFlashConfig(
    vocab_size=V,
    hidden_size=1024,
    num_layers=4,
    num_attention_heads=16,
    ffn_hidden_size=2816,
    q_lora_rank=384,
    kv_lora_rank=256,
    qk_nope_head_dim=64,
    qk_rope_head_dim=32,
    head_dim=32,
    v_head_dim=64,
    moe_topk=4,
    n_routed_experts=16,
    zero_expert_num=8,
    expert_ffn_hidden_size=512,
    routed_scaling_factor=6.0,
    max_position_embeddings=4096,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
cfg._attn_implementation = "sdpa"
model = LongcatFlashForCausalLM(cfg).to("cuda")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model fp32")

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.05, fused=True)
model.train()
ACCUM = 2
for _step in range(2):
    for _micro in range(ACCUM):
        ids = torch.randint(3, V, (2, 1024), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        (out.loss / ACCUM).backward()
        del out, ids
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
report("phase1 train 2 steps x 2 micro-batches, checkpointing, bf16 autocast, fused adamw")

model.gradient_checkpointing_disable()
model.config.use_cache = True
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids = torch.randint(3, V, (1, 2048), device="cuda")
    logits = model(input_ids=ids, logits_to_keep=1, use_cache=False).logits
    print(f"eval logits {tuple(logits.shape)} {logits.dtype}")
    del logits, ids
report("phase2 eval 1 x 2048 inference_mode, logits_to_keep=1")

prompts = torch.randint(3, V, (4, 256), device="cuda")


def generate(**kwargs):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        return model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=64,
            min_new_tokens=64,
            do_sample=False,
            **kwargs,
        )


gen = generate()
print(f"dynamic cache: {tuple(gen.shape)}")
del gen
report("phase3 greedy generate 4 x 256 + 64, dynamic latent cache")

gen = generate(cache_implementation="static", disable_compile=True)
print(f"static cache: {tuple(gen.shape)}")
del gen
report("phase4 greedy generate 4 x 256 + 64, static latent cache")
