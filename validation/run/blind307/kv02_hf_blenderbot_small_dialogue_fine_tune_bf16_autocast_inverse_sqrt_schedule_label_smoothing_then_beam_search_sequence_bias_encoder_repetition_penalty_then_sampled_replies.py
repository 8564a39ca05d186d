"""Dialogue fine-tuning and decoding with HF BlenderbotSmall (model_type "blenderbot-small", post-LN
encoder-decoder with a layernorm on the embeddings): BlenderbotSmallForConditionalGeneration from a
config 1024 wide with 12 + 12 layers and blenderbot-small's 54,944-token vocabulary. 3 steps of full
fine-tuning on 32 contexts of 128 tokens with 64-token replies (labels padded with -100, decoder
inputs built by the model from the labels) under bf16 autocast, the loss recomputed with label
smoothing 0.1 from the logits, AdamW (foreach) with transformers' inverse square-root schedule after
a warmup, gradients clipped. Then replies for 16 contexts by beam search (4 beams) with a sequence
bias on two n-grams, an encoder repetition penalty, an encoder no-repeat n-gram size, a forced EOS and
a length penalty, at a fixed 40 new tokens; then sampled replies (top-k, top-p, temperature, 3 per
context, renormalized logits) with their per-token log-probabilities from the returned logits.

Phases: 0 model built; 1 first step; 2 two more steps; 3 beam search; 4 sampling."""

import os

import torch
import torch.nn.functional as F
from transformers import (
    BlenderbotSmallConfig,
    BlenderbotSmallForConditionalGeneration,
    get_inverse_sqrt_schedule,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3072)
if SMALL:
    config = BlenderbotSmallConfig(
        vocab_size=300,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
    )
    B, SRC, TGT, GEN_B, NEW = 2, 16, 8, 2, 6
else:
    config = BlenderbotSmallConfig(
        vocab_size=54944,
        d_model=1024,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=16,
        decoder_attention_heads=16,
        encoder_ffn_dim=4096,
        decoder_ffn_dim=4096,
        max_position_embeddings=512,
    )
    B, SRC, TGT, GEN_B, NEW = 32, 128, 64, 16, 40
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config.decoder_start_token_id = 1
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def contexts(n, length):
    ids = torch.zeros(n, length, dtype=torch.long)
    mask = torch.zeros(n, length, dtype=torch.long)
    for i in range(n):
        used = int(torch.randint(length // 2, length + 1, ()).item())
        ids[i, :used] = torch.randint(4, config.vocab_size, (used,))
        ids[i, used - 1] = config.eos_token_id
        mask[i, :used] = 1
    return ids.to(device), mask.to(device)


def replies(n, length):
    labels = torch.full((n, length), -100)
    for i in range(n):
        used = int(torch.randint(length // 4, length + 1, ()).item())
        labels[i, :used] = torch.randint(4, config.vocab_size, (used,))
        labels[i, used - 1] = config.eos_token_id
    return labels.to(device)


model = BlenderbotSmallForConditionalGeneration(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, foreach=True)
scheduler = get_inverse_sqrt_schedule(optimizer, num_warmup_steps=2)
report("built")

model.train()
for step in range(3):
    ids, mask = contexts(B, SRC)
    labels = replies(B, TGT)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask, labels=labels).logits
    loss = F.cross_entropy(logits.float().view(-1, config.vocab_size), labels.view(-1), label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    del logits, loss, ids, mask, labels
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
ids, mask = contexts(GEN_B, SRC)
with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    beams = model.generate(
        input_ids=ids,
        attention_mask=mask,
        num_beams=4,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        length_penalty=0.8,
        sequence_bias={(5, 6): -4.0, (7,): -10.0},
        encoder_repetition_penalty=1.2,
        encoder_no_repeat_ngram_size=3,
        forced_eos_token_id=config.eos_token_id,
        early_stopping=True,
    )
print(f"beam replies {tuple(beams.shape)}")
report("beam")

with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    sampled = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        top_k=50,
        top_p=0.9,
        temperature=0.8,
        num_return_sequences=3,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        renormalize_logits=True,
        return_dict_in_generate=True,
        output_logits=True,
    )
logits = torch.stack(sampled.logits, dim=1).float()
chosen = sampled.sequences[:, 1:]
logprobs = logits.log_softmax(-1).gather(-1, chosen.unsqueeze(-1)).squeeze(-1)
print(f"sampled {tuple(sampled.sequences.shape)} mean logprob {logprobs.mean().item():.3f}")
report("sample")
