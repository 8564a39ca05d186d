"""FourierFT on a Qwen2 decoder: a from-config Qwen2 (6 layers, d 1024, 16 heads with 4 KV heads, MLP
2816, vocab 32000, bf16 weights) with peft's FourierFT on q_proj and v_proj (3,000 learnable spectral
coefficients per layer at fixed random frequencies, scaling 150). FourierFT's forward scatters the
coefficients into a dense (out, in) fp32 spectrum and takes `torch.fft.ifft2(...).real` of it every
forward (peft/tuners/fourierft/layer.py `get_delta_weight`): a dense delta per adapted layer per step.
AdamW over the coefficients, batch 4 x 512, three steps; then the eval loss under no_grad; then
merge_and_unload and a greedy generate of 32 new tokens (min_new_tokens = max_new_tokens). 4 phases."""

import torch
from peft import FourierFTConfig, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM

torch.manual_seed(2501)
V, T, B = 32000, 512, 4


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen2Config(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
)
model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
model = get_peft_model(
    model,
    FourierFTConfig(
        n_frequency=3000, scaling=150.0, random_loc_seed=777, target_modules=["q_proj", "v_proj"]
    ),
)
model.print_trainable_parameters()
model.cuda()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
ids = torch.randint(0, V, (B, T), device="cuda")
report("setup")

model.train()
for _ in range(3):
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss
report("train_fourierft_3_steps")

model.eval()
with torch.no_grad():
    ev = model(input_ids=ids, labels=ids).loss.item()
report("eval_no_grad")

merged = model.merge_and_unload()
del opt
prompt = torch.randint(0, V, (2, 64), device="cuda")
with torch.no_grad():
    out = merged.generate(prompt, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
print(tuple(out.shape), round(ev, 3))
report("merged_greedy_generate")
