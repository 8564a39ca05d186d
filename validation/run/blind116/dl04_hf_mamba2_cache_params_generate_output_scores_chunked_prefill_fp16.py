"""HF Mamba-2 (Mamba2ForCausalLM from config, fp16 weights, torch path): 1536 wide, 24 layers, 48
heads of 64, d_state 128, 8 groups, chunk 256, vocab 50,288. Inference only: a perplexity pass at
batch 4 x 2048 under inference_mode; greedy generate() of 64 tokens from a 1024-token prompt at batch
8 with its Mamba2Cache; a sampled generate() (temperature 0.8, top-p 0.95) at batch 4 returning
its scores (return_dict_in_generate, output_scores); then a manual decode loop that feeds
cache_params and cache_position one token at a time for 32 tokens; 5 phases."""

import os

import torch
from transformers import Mamba2Config, Mamba2ForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11604)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    config = Mamba2Config(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_heads=8,
        head_dim=16,
        state_size=16,
        n_groups=2,
        chunk_size=16,
    )
    B, T, P, NEW, LOOP = 2, 64, 32, 4, 3
else:
    config = Mamba2Config(
        vocab_size=50288,
        hidden_size=1536,
        num_hidden_layers=24,
        num_heads=48,
        head_dim=64,
        state_size=128,
        n_groups=8,
        chunk_size=256,
    )
    B, T, P, NEW, LOOP = 4, 2048, 1024, 64, 32
model = Mamba2ForCausalLM(config).to(device=device, dtype=torch.float16).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()
with torch.inference_mode():
    ids = torch.randint(0, config.vocab_size, (B, T), device=device)
    loss = model(input_ids=ids, labels=ids).loss
    ppl = torch.exp(loss.float())
if device == "cuda":
    print(
        f"ppl {ppl.item():.1f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del ids, loss
prompt = torch.randint(0, config.vocab_size, (2 * B, P), device=device)
with torch.inference_mode():
    gen = model.generate(prompt, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
if device == "cuda":
    print(
        f"greedy {tuple(gen.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del gen
with torch.inference_mode():
    res = model.generate(
        prompt[:B],
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=True,
        temperature=0.8,
        top_p=0.95,
        return_dict_in_generate=True,
        output_scores=True,
    )
    best = torch.stack(res.scores, dim=1).float().log_softmax(-1).amax(-1).sum(-1)
if device == "cuda":
    print(
        f"sample {tuple(res.sequences.shape)} {len(res.scores)} scores"
        f" peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
del res, best
with torch.inference_mode():
    out = model(input_ids=prompt[:B], use_cache=True)
    cache = out.cache_params
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    tokens = [token]
    for i in range(LOOP):
        out = model(
            input_ids=token,
            cache_params=cache,
            use_cache=True,
            cache_position=torch.tensor([P + i], device=device),
        )
        cache = out.cache_params
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(token)
    text = torch.cat(tokens, dim=1)
if device == "cuda":
    print(
        f"loop {tuple(text.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()
