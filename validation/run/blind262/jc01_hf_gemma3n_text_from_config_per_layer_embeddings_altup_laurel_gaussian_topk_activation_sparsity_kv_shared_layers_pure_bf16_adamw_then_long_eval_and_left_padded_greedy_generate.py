"""HF Gemma 3n text decoder (Gemma3nForCausalLM from a Gemma3nTextConfig, random weights, bf16, sdpa):
10 layers of 1024 (8 heads, 2 key/value heads of 128), sliding window 512 with every fifth layer
global, vocabulary 32,000 (tied, final logit softcap 30). Its 2025 pieces: per-layer embeddings
(a second 32,000 x 10*256 table, projected and gated into every layer), AltUp with 4 streams
(predict / correct around each layer), the LAuReL low-rank residual (rank 64), Gaussian top-k
activation sparsity (0.95) in the MLPs of the first 3 layers (normal icdf of the target), and the last
4 layers sharing the key/value states of earlier layers (no KV projections of their own used).
Phase 1: pure bf16 training with AdamW (foreach), batch 4 x 1024, 3 steps. Phase 2: evaluation under
no_grad at batch 2 x 3072 (beyond the window). Phase 3: greedy generate() of 32 tokens for a
left-padded batch of 3 prompts (900, 640, 300 tokens, the mask from host lengths) with the
model's default cache. Phase 4: sampling generate() (top-k 50, temperature 0.8) of 24 tokens with
num_return_sequences 4 from one 512-token prompt. 4 phases after the model's."""

import torch
from transformers import Gemma3nForCausalLM, Gemma3nTextConfig

torch.manual_seed(26201)
V, D, L = 32000, 1024, 10


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Gemma3nTextConfig(
    vocab_size=V,
    vocab_size_per_layer_input=V,
    hidden_size=D,
    intermediate_size=4096,
    num_hidden_layers=L,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=128,
    hidden_size_per_layer_input=256,
    sliding_window=512,
    layer_types=(["sliding_attention"] * 4 + ["full_attention"]) * 2,
    num_kv_shared_layers=4,
    laurel_rank=64,
    altup_num_inputs=4,
    activation_sparsity_pattern=[0.95] * 3 + [0.0] * (L - 3),
    max_position_embeddings=8192,
    pad_token_id=0,
    eos_token_id=1,
    bos_token_id=2,
)
cfg._attn_implementation = "sdpa"
model = Gemma3nForCausalLM(cfg).to("cuda", torch.bfloat16)
report("model")

opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
model.train()
for _ in range(3):
    ids = torch.randint(3, V, (4, 1024), device="cuda")
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, ids
report("train_pure_bf16_adamw")

model.eval()
with torch.no_grad():
    ids = torch.randint(3, V, (2, 3072), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    del ids, loss
report("eval_no_grad_3072")

lengths = [900, 640, 300]
width = max(lengths)
ids = torch.zeros(len(lengths), width, dtype=torch.long)
mask = torch.zeros(len(lengths), width, dtype=torch.long)
for i, n in enumerate(lengths):
    ids[i, width - n :] = torch.randint(3, V, (n,))
    mask[i, width - n :] = 1
with torch.no_grad():
    out = model.generate(
        ids.cuda(),
        attention_mask=mask.cuda(),
        max_new_tokens=32,
        min_new_tokens=32,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
    )
del out
report("generate_greedy_left_padded")

with torch.no_grad():
    prompt = torch.randint(3, V, (1, 512), device="cuda")
    out = model.generate(
        prompt,
        max_new_tokens=24,
        min_new_tokens=24,
        do_sample=True,
        top_k=50,
        temperature=0.8,
        num_return_sequences=4,
        eos_token_id=None,
        pad_token_id=0,
    )
del out, prompt
report("generate_sampling_4_returns")
