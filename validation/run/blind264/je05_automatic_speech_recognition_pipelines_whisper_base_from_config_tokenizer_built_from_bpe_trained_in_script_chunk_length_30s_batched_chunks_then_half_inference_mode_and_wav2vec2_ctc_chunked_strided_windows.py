"""Speech recognition pipelines over long synthetic recordings (numpy tones and noise at 16 kHz, 12.5 to
75.3 s), offline. Whisper: a byte-level BPE trained in the script (tokenizers' BpeTrainer, 4,000 tokens,
over a fixed corpus made by a seeded `random.Random`) handed to `WhisperTokenizer(vocab=..., merges=...)`
with Whisper's special tokens up to `<|notimestamps|>` added (no timestamp tokens in the vocabulary, so
`_decode_asr` and the segment split after generate find none, on the GPU as here), `WhisperFeatureExtractor()`
with its defaults (80 mels, 30 s windows padded to 3,000 frames), a from-config Whisper-Base-sized model
(6 + 6 layers, d 512, 8 heads, fp32). `pipeline("automatic-speech-recognition", chunk_length_s=30)`: each
recording cut into 30 s windows with 5 s strides (`chunk_iter`), 8 windows in all, batch_size 4, each
window decoded by Whisper's generate to 48 tokens (min_new_tokens = max_new_tokens) with the pipeline's
default beam search (`_default_generation_config`: num_beams 5, "follows openai's whisper
implementation", merged under the model's own generation config: 20 rows a batch); then the model
`.half()` after the pipeline was built (the pipeline casts the features to the model's dtype) under
`torch.inference_mode()`, batch_size 8. Then wav2vec 2.0 CTC: a character vocabulary written to a
temporary vocab.json for `Wav2Vec2CTCTokenizer`, `Wav2Vec2FeatureExtractor()` with its defaults, a
from-config `Wav2Vec2ForCTC` (Base: 7 conv layers of 512, 12 layers of 768, fp32), `chunk_length_s=10`
with the default stride (10 / 6 s a side, aligned to the 320-sample frame), the windows padded to the
longest in each batch, batch_size 4; then `.half()` and batch_size 8 under `torch.inference_mode()`.
No value-dependent sizes. 4 phases."""

import json
import os
import random
import tempfile

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    Wav2Vec2Config,
    Wav2Vec2CTCTokenizer,
    Wav2Vec2FeatureExtractor,
    Wav2Vec2ForCTC,
    WhisperConfig,
    WhisperFeatureExtractor,
    WhisperForConditionalGeneration,
    WhisperTokenizer,
    pipeline,
)

torch.manual_seed(2645)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rs = np.random.RandomState(2645)
recordings = []
for i, seconds in enumerate([12.5, 25.0, 47.0, 75.3]):
    t = np.arange(int(16000 * seconds)) / 16000
    wave = 0.3 * np.sin(2 * np.pi * (180 + 40 * i) * t) + 0.05 * rs.randn(t.size)
    recordings.append(wave.astype(np.float32))

rng = random.Random(5)
syll = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "ib", "an", "ust", "pe", "qua", "zo"]
corpus = [
    " ".join("".join(rng.choice(syll) for _ in range(rng.randint(1, 3))) for _ in range(24))
    for _ in range(2000)
]
bpe = Tokenizer(models.BPE())
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.train_from_iterator(
    corpus,
    trainers.BpeTrainer(
        vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    ),
)
state = json.loads(bpe.to_str())["model"]
merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>"]
specials += ["<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
w_tok = WhisperTokenizer(vocab=state["vocab"], merges=merges, pad_token="<|endoftext|>")
w_tok.add_special_tokens({"additional_special_tokens": specials})
sid = {s: w_tok.convert_tokens_to_ids(s) for s in specials}
print(len(w_tok), sid["<|notimestamps|>"])

w_cfg = WhisperConfig(
    vocab_size=len(w_tok),
    num_mel_bins=80,
    d_model=512,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=8,
    decoder_attention_heads=8,
    encoder_ffn_dim=2048,
    decoder_ffn_dim=2048,
    max_source_positions=1500,
    max_target_positions=448,
    pad_token_id=sid["<|endoftext|>"],
    bos_token_id=sid["<|endoftext|>"],
    eos_token_id=sid["<|endoftext|>"],
    decoder_start_token_id=sid["<|startoftranscript|>"],
    suppress_tokens=None,
    begin_suppress_tokens=None,
)
whisper = WhisperForConditionalGeneration(w_cfg).eval()
whisper.generation_config.no_timestamps_token_id = sid["<|notimestamps|>"]
asr = pipeline(
    "automatic-speech-recognition",
    model=whisper,
    tokenizer=w_tok,
    feature_extractor=WhisperFeatureExtractor(),
    device=0,
)
out = asr(
    recordings, chunk_length_s=30, batch_size=4, generate_kwargs={"max_new_tokens": 48, "min_new_tokens": 48}
)
print(len(out))
report("whisper_chunked_fp32_batch4")

whisper.half()
with torch.inference_mode():
    out = asr(
        recordings,
        chunk_length_s=30,
        batch_size=8,
        generate_kwargs={"max_new_tokens": 48, "min_new_tokens": 48},
    )
print(len(out))
report("whisper_chunked_half_inference_mode_batch8")

chars = ["<pad>", "<s>", "</s>", "<unk>", "|", *list("abcdefghijklmnopqrstuvwxyz'")]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "vocab.json")
    with open(path, "w") as f:
        json.dump({c: i for i, c in enumerate(chars)}, f)
    c_tok = Wav2Vec2CTCTokenizer(path, unk_token="<unk>", pad_token="<pad>", word_delimiter_token="|")
ctc = Wav2Vec2ForCTC(Wav2Vec2Config(vocab_size=len(chars), pad_token_id=0, ctc_loss_reduction="mean")).eval()
ctc_asr = pipeline(
    "automatic-speech-recognition",
    model=ctc,
    tokenizer=c_tok,
    feature_extractor=Wav2Vec2FeatureExtractor(),
    device=0,
)
out = ctc_asr(recordings, chunk_length_s=10, batch_size=4)
print(len(out))
report("wav2vec2_ctc_chunked_fp32_batch4")

ctc.half()
with torch.inference_mode():
    out = ctc_asr(recordings, chunk_length_s=10, batch_size=8)
print(len(out))
report("wav2vec2_ctc_chunked_half_inference_mode_batch8")
