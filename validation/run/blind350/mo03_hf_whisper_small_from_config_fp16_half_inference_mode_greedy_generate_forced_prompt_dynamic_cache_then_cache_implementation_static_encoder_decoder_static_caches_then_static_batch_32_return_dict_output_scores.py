"""Batch transcription with a Whisper-small-sized WhisperForConditionalGeneration built from a WhisperConfig
(768 wide, 12 encoder and 12 decoder layers, 12 heads, FFN 3,072, vocabulary 51,865, 80 mel bins, 1,500
encoder positions; random init), `.half()` and under `inference_mode`, greedy short-form `generate()` on 30 s
log-mel inputs (80 x 3,000) with the English transcription prompt given as `decoder_input_ids`
(<|startoftranscript|><|en|><|transcribe|><|notimestamps|>) and a fixed length
(`max_new_tokens == min_new_tokens`).

Then the same with `cache_implementation="static"`: generate builds an EncoderDecoderCache of two
StaticCaches, the self-attention one sized for the whole generation and the cross-attention one for the
encoder's 1,500 positions, allocated up front instead of grown by `torch.cat` each step (with
`disable_compile=True`: a static cache otherwise makes generate compile the decoding step with
`torch.compile`, which alone takes longer than this script may run); then the static cache
at batch 32 with `return_dict_in_generate=True, output_scores=True` (every step's processed fp16 scores kept).

Phases: 0 model in fp16; 1 dynamic cache, batch 16, 96 new tokens; 2 static cache, batch 16, 96 new tokens;
3 static cache, batch 32, 64 new tokens, scores returned. Seeded; no sizes depend on values."""

import os

import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3503)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = WhisperConfig(
        vocab_size=400,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=64,
        decoder_start_token_id=1,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=2,
    )
    B1, NEW1, B2, NEW2 = 2, 8, 3, 6
    PROMPT = [1, 3, 4, 5]
else:
    config = WhisperConfig(
        vocab_size=51865,
        d_model=768,
        encoder_layers=12,
        decoder_layers=12,
        encoder_attention_heads=12,
        decoder_attention_heads=12,
        encoder_ffn_dim=3072,
        decoder_ffn_dim=3072,
        num_mel_bins=80,
        max_source_positions=1500,
        max_target_positions=448,
        decoder_start_token_id=50258,
        pad_token_id=50257,
        eos_token_id=50257,
        bos_token_id=50257,
    )
    B1, NEW1, B2, NEW2 = 16, 96, 32, 64
    PROMPT = [50258, 50259, 50359, 50363]
config._attn_implementation = "sdpa"
dtype = torch.float16 if cuda else torch.float32


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


model = WhisperForConditionalGeneration(config).to(device, dtype).eval()
model.config.forced_decoder_ids = None
model.generation_config.forced_decoder_ids = None
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 whisper-small fp16")


def transcribe(bs, new, **kwargs):
    feats = torch.randn(bs, 80, 3000, device=device, dtype=dtype)
    prompt = torch.tensor(PROMPT, device=device).repeat(bs, 1)
    with torch.inference_mode():
        return model.generate(
            input_features=feats,
            decoder_input_ids=prompt,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            **kwargs,
        )


out = transcribe(B1, NEW1)
print(f"dynamic cache: {tuple(out.shape)}")
del out
report(f"phase1 greedy generate, dynamic cache, {B1} x {NEW1}")

out = transcribe(B1, NEW1, cache_implementation="static", disable_compile=True)
print(f"static cache: {tuple(out.shape)}")
del out
report(f"phase2 greedy generate, static cache, {B1} x {NEW1}")

out = transcribe(
    B2,
    NEW2,
    cache_implementation="static",
    disable_compile=True,
    return_dict_in_generate=True,
    output_scores=True,
)
print(f"static cache, scores: {tuple(out.sequences.shape)}, {len(out.scores)} x {tuple(out.scores[0].shape)}")
del out
report(f"phase3 greedy generate, static cache, {B2} x {NEW2}, scores returned")
