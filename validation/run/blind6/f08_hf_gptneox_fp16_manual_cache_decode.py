"""HF GPTNeoXForCausalLM from a Pythia-1.4B-like GPTNeoXConfig (2048 wide, 24 layers, 16 heads, partial
rotary 0.25, parallel residual, 50304 vocab, untied; 1.4B) converted with `.half()`, decoding by hand under
`no_grad`: a prefill of batch 48 x 1024 prompt tokens with `use_cache=True`, then 64 greedy steps feeding
one token and `past_key_values` back (the cache grows each step), the last position's logits only kept;
then a second request of batch 12 x 3072."""

import os

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

D, LAYERS, HEADS, VOCAB, B, PROMPT, NEW = (
    (64, 2, 4, 320, 4, 16, 4) if os.environ.get("SMOKE") else (2048, 24, 16, 50304, 48, 1024, 64)
)
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(608)

config = GPTNeoXConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=4 * D,
    rotary_pct=0.25,
    max_position_embeddings=4 * PROMPT,
    use_parallel_residual=True,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,
)
model = GPTNeoXForCausalLM(config).half().to(device).eval()
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


@torch.no_grad()
def decode(batch, prompt, new_tokens):
    ids = torch.randint(1, VOCAB, (batch, prompt), device=device)
    out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
    past = out.past_key_values
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    generated = [token]
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"prefill {batch}x{prompt} peak {peak} reserved {reserved}")
        torch.cuda.reset_peak_memory_stats()
    for _ in range(new_tokens - 1):
        out = model(input_ids=token, past_key_values=past, use_cache=True)
        past = out.past_key_values
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        generated.append(token)
    text = torch.cat(generated, dim=1).cpu()
    if device == "cuda":
        peak, reserved = torch.cuda.max_memory_allocated(), torch.cuda.memory_reserved()
        print(f"decode {new_tokens} peak {peak} reserved {reserved}")
        torch.cuda.reset_peak_memory_stats()
    return text


print(tuple(decode(B, PROMPT, NEW).shape))
print(tuple(decode(B // 4, 3 * PROMPT, NEW // 2).shape))
