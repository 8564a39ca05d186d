"""A multi-turn chat with HF Starcoder2 built from a config (sliding-window attention of 512, 12
layers of 1536 wide, 12 heads with 4 KV heads, biases, a 49,152-symbol vocabulary) in bf16 under
inference_mode: one DynamicCache built from the model's config (sliding layers keep their window)
carried across three turns, each turn appending host-made user tokens to the whole conversation
and sampling 48 tokens (temperature 0.8, top-k 50, top-p 0.9, a fixed seed) through a hand-written
LogitsProcessor that bans a list of tokens and adds a bias to others; 4 phases."""

import os

import torch
from transformers import (
    DynamicCache,
    LogitsProcessor,
    LogitsProcessorList,
    Starcoder2Config,
    Starcoder2ForCausalLM,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11002)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 49152
cfg = Starcoder2Config(
    vocab_size=V,
    hidden_size=64 if SMALL else 1536,
    intermediate_size=256 if SMALL else 6144,
    num_hidden_layers=2 if SMALL else 12,
    num_attention_heads=4 if SMALL else 12,
    num_key_value_heads=2 if SMALL else 4,
    sliding_window=16 if SMALL else 512,
    max_position_embeddings=8192,
    bos_token_id=0,
    eos_token_id=0,
)
model = Starcoder2ForCausalLM(cfg).to(device, torch.bfloat16).eval()


class BanAndBias(LogitsProcessor):
    def __init__(self, banned, boosted, bias):
        self.banned = torch.tensor(banned, device=device)
        self.boosted = torch.tensor(boosted, device=device)
        self.bias = bias

    def __call__(self, input_ids, scores):
        scores = scores.index_fill(1, self.banned, float("-inf"))
        scores[:, self.boosted] += self.bias
        return scores


processors = LogitsProcessorList([BanAndBias(list(range(3, 40)), [100, 200, 300, 400], 1.5)])
TURNS = [30, 12, 25] if SMALL else [900, 230, 610]
N = 6 if SMALL else 48
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
cache = DynamicCache(config=model.config)
history = torch.empty(1, 0, dtype=torch.long, device=device)
with torch.inference_mode():
    for turn, n in enumerate(TURNS):
        user = torch.randint(40, V, (1, n)).to(device)
        history = torch.cat([history, user], dim=1)
        torch.manual_seed(11002 + turn)
        history = model.generate(
            history,
            attention_mask=torch.ones_like(history),
            past_key_values=cache,
            do_sample=True,
            temperature=0.8,
            top_k=50,
            top_p=0.9,
            logits_processor=processors,
            max_new_tokens=N,
            min_new_tokens=N,
            pad_token_id=0,
        )
        if device == "cuda":
            print(
                f"turn {turn} {tuple(history.shape)} cache {cache.get_seq_length()}"
                f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
    del cache
    logits = model(history).logits[:, -1].float()
if device == "cuda":
    print(
        f"rescore {tuple(logits.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
