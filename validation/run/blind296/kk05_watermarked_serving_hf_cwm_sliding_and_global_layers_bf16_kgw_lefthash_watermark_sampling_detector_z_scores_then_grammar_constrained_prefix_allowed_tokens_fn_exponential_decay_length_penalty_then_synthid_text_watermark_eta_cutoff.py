"""Watermarked LLM serving with transformers' generation tools: KGW green-list watermarking and its
detector, grammar-constrained decoding (prefix_allowed_tokens_fn), and SynthID-Text tournament
watermarking.

Model: a CwmForCausalLM from CwmConfig (16 layers of 1024, 16 heads, 4 key/value heads, head_dim 64,
one global-attention layer in four and sliding-window 256 attention elsewhere, SwiGLU 2816, vocabulary
32,000) in bf16, inference only.
Phases: (1) build + KGW-watermarked sampling (WatermarkingConfig: lefthash seeding, bias 2.5, green
ratio 0.25) of 64 tokens after 128-token prompts at batch 8, and an unwatermarked batch, both scored
by WatermarkDetector (z-scores per row); (2) constrained greedy decoding with prefix_allowed_tokens_fn
(a toy grammar: even steps restricted to a 4,096-token "field" vocabulary, odd steps to 512 "separator"
tokens) and exponential_decay_length_penalty, batch 8, 192-token prompts, 64 new tokens; (3) SynthID-Text
watermarked sampling (30 keys, ngram_len 5) with top_k 40 and eta_cutoff at batch 12, 80 new tokens after
160-token prompts. 3 phases."""

import os

import torch
from transformers import (
    CwmConfig,
    CwmForCausalLM,
    SynthIDTextWatermarkingConfig,
    WatermarkDetector,
    WatermarkingConfig,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29605)
if SMALL:
    layers = 4
    cfg = CwmConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=16,
        max_position_embeddings=16384,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    KGW_B, PROMPT, NEW, SPEC_B, SPEC_PROMPT, SPEC_NEW, SYN_B, SYN_PROMPT, SYN_NEW = (
        2, 16, 8, 2, 16, 8, 2, 16, 8,
    )  # fmt: skip
else:
    layers = 16
    cfg = CwmConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        sliding_window=256,
        max_position_embeddings=16384,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    KGW_B, PROMPT, NEW, SPEC_B, SPEC_PROMPT, SPEC_NEW, SYN_B, SYN_PROMPT, SYN_NEW = (
        8, 128, 64, 8, 192, 64, 12, 160, 80,
    )  # fmt: skip
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = CwmForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.eval()
kgw = WatermarkingConfig(bias=2.5, greenlist_ratio=0.25, seeding_scheme="lefthash")
detector = WatermarkDetector(model_config=model.config, device=device, watermarking_config=kgw)

with torch.inference_mode():
    prompts = torch.randint(3, cfg.vocab_size, (KGW_B, PROMPT), device=device)
    common = dict(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_p=0.95,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
    )
    marked = model.generate(watermarking_config=kgw, **common)
    plain = model.generate(**common)
    z_marked = detector(marked[:, PROMPT:], return_dict=True).z_score
    z_plain = detector(plain[:, PROMPT:], return_dict=True).z_score
print(f"kgw z-score marked {z_marked.mean():.2f} plain {z_plain.mean():.2f}")
report("build, KGW watermarked sampling and detection")

FIELD = list(range(3, min(4099, cfg.vocab_size)))
SEPARATOR = list(range(cfg.vocab_size - 512, cfg.vocab_size))


def allowed_tokens(batch_id, sent):
    """Toy grammar: field tokens at even generated positions, separator tokens at odd ones."""
    return FIELD if (sent.shape[-1] - SPEC_PROMPT) % 2 == 0 else SEPARATOR


with torch.inference_mode():
    prompts = torch.randint(3, cfg.vocab_size, (SPEC_B, SPEC_PROMPT), device=device)
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        prefix_allowed_tokens_fn=allowed_tokens,
        exponential_decay_length_penalty=(SPEC_NEW // 2, 1.05),
        do_sample=False,
        max_new_tokens=SPEC_NEW,
        min_new_tokens=SPEC_NEW,
    )
print(f"constrained generated {tuple(out.shape)}")
report("grammar-constrained decoding")

synthid = SynthIDTextWatermarkingConfig(
    keys=[654, 400, 836, 123, 340, 443, 597, 160, 57, 29] * 3, ngram_len=5
)
with torch.inference_mode():
    prompts = torch.randint(3, cfg.vocab_size, (SYN_B, SYN_PROMPT), device=device)
    out = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        watermarking_config=synthid,
        do_sample=True,
        top_k=40,
        eta_cutoff=3e-4,
        max_new_tokens=SYN_NEW,
        min_new_tokens=SYN_NEW,
    )
print(f"synthid generated {tuple(out.shape)}")
report("SynthID watermarked sampling")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
