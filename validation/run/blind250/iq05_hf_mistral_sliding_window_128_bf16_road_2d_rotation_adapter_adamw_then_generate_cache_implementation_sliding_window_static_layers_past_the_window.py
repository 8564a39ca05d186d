"""RoAd on a Mistral decoder with sliding-window attention, then generation through the sliding-window
static cache: a from-config Mistral (6 layers, d 1024, 16 heads with 4 KV heads, MLP 2816, vocab 32000,
sliding_window 128, bf16 weights) with peft's RoAd (road_2: a learnable 2-D rotation per pair of
output features, on q/k/v/o and gate/up/down_proj; peft/tuners/road/layer.py applies it to the base
output in every forward). AdamW, batch 4 x 384, three steps. Then generation with
cache_implementation="sliding_window" (transformers' deprecated name for a static cache whose layers
follow the config's sliding window) for 4 prompts of 96 tokens and 64 new tokens, so the sequence runs
past the window (min_new_tokens = max_new_tokens); then the same with the default dynamic cache. 4 phases."""

import torch
from peft import RoadConfig, get_peft_model
from transformers import MistralConfig, MistralForCausalLM

torch.manual_seed(2505)
V, T, B = 32000, 384, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = MistralConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
    sliding_window=128,
    pad_token_id=0,
    eos_token_id=2,
    bos_token_id=1,
)
model = MistralForCausalLM(cfg).to(torch.bfloat16)
model = get_peft_model(
    model,
    RoadConfig(
        variant="road_2",
        group_size=64,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    ),
)
model.print_trainable_parameters()
model.cuda()
ids = torch.randint(3, V, (B, T), device="cuda")
report("setup")

opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
model.train()
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_road_3_steps")

model.eval()
prompts = torch.randint(3, V, (4, 96), device="cuda")
with torch.no_grad():
    g = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=False,
        cache_implementation="sliding_window",
        disable_compile=True,
    )
print(tuple(g.shape))
del g
report("generate_sliding_window_static_cache")

with torch.no_grad():
    g = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=False,
    )
print(tuple(g.shape))
report("generate_dynamic_cache")
