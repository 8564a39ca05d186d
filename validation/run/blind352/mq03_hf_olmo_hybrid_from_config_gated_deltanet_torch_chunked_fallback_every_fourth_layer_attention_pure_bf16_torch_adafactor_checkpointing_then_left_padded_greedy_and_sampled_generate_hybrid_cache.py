"""HF OLMo-Hybrid (OlmoHybridForCausalLM from an OlmoHybridConfig, random weights, sdpa): 8 layers of
1024, three gated-DeltaNet linear-attention layers then one full-attention layer, twice (the config's
default pattern); the DeltaNet layers (16 heads, keys 48 and values 96 per head, a depthwise causal
conv1d of kernel 4 over q/k/v, a dedicated output gate, negative eigenvalues allowed) run transformers'
torch fallbacks (no causal-conv1d, no flash-linear-attention on the machine): the chunked gated delta
rule (chunks of 64) for prompts and the recurrent rule for single tokens; SwiGLU MLP 2,816, vocabulary
100,352, untied head.

Phase 0: the model in pure bf16 (.to(bfloat16)). Phase 1: two steps at batch 4 x 1024 with HF
non-reentrant gradient checkpointing and torch.optim.Adafactor (factored second moments, lr 1e-2).
Phase 2: greedy generate() of 64 new tokens (min == max) from 4 prompts of 384, left-padded by 0, 32,
64 and 96 tokens with their attention mask, with the default dynamic cache (attention layers' keys
and values, DeltaNet layers' conv and recurrent states). Phase 3: sampled generate() (top_k 50,
temperature 0.8) of 2 sequences for each of 4 prompts of 512, 96 new tokens (min == max). Seeded;
no sizes depend on values."""

import torch
from transformers import OlmoHybridConfig, OlmoHybridForCausalLM

torch.manual_seed(35203)
V = 100352


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = OlmoHybridConfig(
    vocab_size=V,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=16,
    max_position_embeddings=4096,
    pad_token_id=100277,
    eos_token_id=100257,
)
cfg._attn_implementation = "sdpa"
model = OlmoHybridForCausalLM(cfg).to("cuda", torch.bfloat16)
print(f"layer types: {cfg.layer_types}")
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 model pure bf16")

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
opt = torch.optim.Adafactor(model.parameters(), lr=1e-2)
model.train()
for step in range(2):
    ids = torch.randint(0, 100000, (4, 1024), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step}: loss {loss.item():.3f}")
    del loss, ids
report("phase1 train 2 steps 4 x 1024, checkpointing, adafactor")

model.gradient_checkpointing_disable()
model.config.use_cache = True
model.eval()

pads = [0, 32, 64, 96]
prompts = torch.randint(0, 100000, (4, 384), device="cuda")
mask = torch.ones_like(prompts)
for row, pad in enumerate(pads):
    prompts[row, :pad] = cfg.pad_token_id
    mask[row, :pad] = 0
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts, attention_mask=mask, max_new_tokens=64, min_new_tokens=64, do_sample=False
    )
print(f"greedy: {tuple(gen.shape)}")
del gen, prompts, mask
report("phase2 greedy generate 4 x 384 left-padded + 64, hybrid cache")

prompts = torch.randint(0, 100000, (4, 512), device="cuda")
with torch.no_grad():
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=96,
        min_new_tokens=96,
        do_sample=True,
        top_k=50,
        temperature=0.8,
        num_return_sequences=2,
    )
print(f"sampled: {tuple(gen.shape)}")
del gen, prompts
report("phase3 sampled generate 4 x 512 x 2 sequences + 96, hybrid cache")
