"""Back-translation with an HF MarianMTModel from a MarianConfig (opus-mt sizes: 6 + 6 layers of 512, 8
heads, feed-forward 2,048, 58,101-token vocabulary shared by encoder, decoder and head, sinusoidal
positions, scaled embeddings) cast by `model.half()`: 1,200 monolingual sentences of 4 to 128 tokens
sorted by length into buckets of 32/64/128 tokens, batch size from a 16,384-token budget (512, 256 and
128 sentences), each batch sampled with top-k 10 and 4 return sequences (the sampling of Edunov et
al.), the pad token banned, half the bucket's length plus 16 new tokens exactly; then 512 short
sentences translated greedily in one batch (40 new tokens at most, 40 at least); then 32 long
sentences encoded once, their `encoder_outputs` handed to a 4-beam search of 96 new tokens; 4 phases."""

import os

import torch
from transformers import MarianConfig, MarianMTModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13804)
if SMALL:
    config = MarianConfig(
        vocab_size=301,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        pad_token_id=300,
        decoder_start_token_id=300,
        eos_token_id=0,
    )
    N, BUDGET, BUCKETS, B_GREEDY, L_GREEDY, T_GREEDY, B_BEAM, T_BEAM = 40, 64, (4, 8, 16), 8, 6, 5, 2, 6
else:
    config = MarianConfig(
        vocab_size=58101,
        d_model=512,
        encoder_layers=6,
        decoder_layers=6,
        encoder_attention_heads=8,
        decoder_attention_heads=8,
        encoder_ffn_dim=2048,
        decoder_ffn_dim=2048,
        max_position_embeddings=512,
        pad_token_id=58100,
        decoder_start_token_id=58100,
        eos_token_id=0,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
    )
    N, BUDGET, BUCKETS, B_GREEDY, L_GREEDY, T_GREEDY, B_BEAM, T_BEAM = (
        1200, 16384, (32, 64, 128), 512, 24, 40, 32, 96
    )  # fmt: skip
device = "cuda" if torch.cuda.is_available() else "cpu"
model = MarianMTModel(config)
model.half()
model.to(device).eval()
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

PAD, EOS = config.pad_token_id, config.eos_token_id


def sentences(n_tokens, length):
    b = len(n_tokens)
    ids = torch.randint(1, PAD, (b, length))
    pos = torch.arange(length)[None, :]
    ids = ids.masked_fill(pos >= n_tokens[:, None], PAD)
    ids[torch.arange(b), n_tokens - 1] = EOS
    return ids.to(device), (pos < n_tokens[:, None]).long().to(device)


lengths = torch.randint(BUCKETS[0] // 8, BUCKETS[-1] + 1, (N,))
lengths, _ = lengths.sort()
synthetic = 0
i = 0
while i < N:
    L = next(b for b in BUCKETS if b >= int(lengths[i]))
    n = lengths[i : i + BUDGET // L]
    n = n[n <= L]
    src, mask = sentences(n, L)
    out = model.generate(
        input_ids=src,
        attention_mask=mask,
        do_sample=True,
        top_k=10,
        num_return_sequences=4,
        max_new_tokens=L // 2 + 16,
        min_new_tokens=L // 2 + 16,
        bad_words_ids=[[PAD]],
    )
    synthetic += out.shape[0]
    i += len(n)
    del src, mask, out
print(f"back-translated {synthetic}")
if device == "cuda":
    print(f"sample peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

src, mask = sentences(torch.randint(L_GREEDY // 2, L_GREEDY + 1, (B_GREEDY,)), L_GREEDY)
out = model.generate(
    input_ids=src,
    attention_mask=mask,
    num_beams=1,
    do_sample=False,
    max_new_tokens=T_GREEDY,
    min_new_tokens=T_GREEDY,
)
print(f"greedy {tuple(out.shape)}")
del src, mask, out
if device == "cuda":
    print(f"greedy peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

src, mask = sentences(torch.full((B_BEAM,), BUCKETS[-1]), BUCKETS[-1])
with torch.inference_mode():
    enc = model.get_encoder()(input_ids=src, attention_mask=mask)
out = model.generate(
    encoder_outputs=enc,
    attention_mask=mask,
    num_beams=4,
    max_new_tokens=T_BEAM,
    min_new_tokens=T_BEAM,
    length_penalty=1.0,
)
print(f"beam {tuple(out.shape)}")
if device == "cuda":
    print(f"beam peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
