"""HF M2M100ForConditionalGeneration (M2M100-418M-like: 12+12 layers, 1,024 wide, 128,112 shared
vocabulary, sinusoidal positions) built from its config in fp16 weights serving translation
requests: a batch of 16 right-padded source sentences (40 to 128 tokens) translated with 4 beams,
a forced target-language BOS token, length penalty 1.0 and exactly 96 new tokens; then 4
sentences with 6 beams and 2 returned sequences each, 64 new tokens; 2 phases."""

import os

import torch
from transformers import M2M100Config, M2M100ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(8904)
if SMALL:
    config = M2M100Config(
        vocab_size=200,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
    )
    L, N1, N2 = 20, 6, 5
else:
    config = M2M100Config(vocab_size=128112, max_position_embeddings=1024)
    L, N1, N2 = 128, 96, 64
FR = config.vocab_size - 50  # a language-code token id, as the tokenizer's lang_code_to_id gives
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
model = M2M100ForConditionalGeneration(config).to(device=device, dtype=dtype).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def sources(b):
    lengths = torch.randint(L * 3 // 10, L + 1, (b,))
    lengths[0] = L
    ids = torch.randint(4, config.vocab_size - 100, (b, L))
    mask = torch.arange(L)[None] < lengths[:, None]
    ids = torch.where(mask, ids, config.pad_token_id)
    ids[torch.arange(b), lengths - 1] = config.eos_token_id
    return ids.to(device), mask.long().to(device)


for b, beams, ret, new in ((16, 4, 1, N1), (4, 6, 2, N2)):
    ids, mask = sources(b)
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            forced_bos_token_id=FR,
            num_beams=beams,
            num_return_sequences=ret,
            length_penalty=1.0,
            max_new_tokens=new,
            min_new_tokens=new,
        )
    if device == "cuda":
        print(
            f"{b}x{beams} beams out {tuple(out.shape)} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, out
