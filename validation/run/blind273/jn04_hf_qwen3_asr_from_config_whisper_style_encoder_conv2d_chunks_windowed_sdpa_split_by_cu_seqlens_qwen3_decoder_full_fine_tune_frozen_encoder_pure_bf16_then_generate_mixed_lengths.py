"""Qwen3-ASR (transformers 5.17's `Qwen3ASRForConditionalGeneration`, the 1.7B layout) built from config and
fine-tuned for speech recognition: the audio encoder (128 mel bins cut into chunks of 100 frames, three
stride-2 Conv2d of 480 channels to 13 positions a chunk, 24 layers of d 1,024 and 16 heads whose attention
runs over windows of 104 positions -- with SDPA transformers splits the packed sequence by `cu_seqlens` and
calls SDPA once per window), a 2-layer projector into d 2,048, and a Qwen3 decoder of 28 layers (16 query /
8 KV heads of 128, MLP 6,144, vocabulary 151,936, tied). Inputs built by hand, no processor: 30-second
clips (3,000 mel frames: 390 audio placeholder tokens), an 8-token prompt before and a 120-token transcript
after (518 tokens), the labels on the transcript only. Pure bf16; the audio encoder frozen, the projector
and the decoder fully trained with non-reentrant gradient checkpointing; 5 AdamW steps of 4 clips with
gradient clipping; a no_grad evaluation; then greedy `generate()` (min_new_tokens == max_new_tokens == 48)
for 2 clips of different lengths, 30 s and 20 s (`input_features_mask` marks 2,000 of the 3,000 frames:
260 audio tokens), the shorter prompt left-padded with `attention_mask` zeros. Seeded; the token counts are
fixed by the masks, no value-dependent sizes. 4 phases."""

import torch
from transformers import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

torch.manual_seed(2734)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = Qwen3ASRConfig(
    audio_config=dict(
        num_mel_bins=128,
        encoder_layers=24,
        encoder_attention_heads=16,
        encoder_ffn_dim=4096,
        d_model=1024,
        n_window=50,
        n_window_infer=800,
        output_dim=2048,
        downsample_hidden_size=480,
    ),
    text_config=dict(
        hidden_size=2048,
        intermediate_size=6144,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151936,
        max_position_embeddings=65536,
        tie_word_embeddings=True,
    ),
)
model = Qwen3ASRForConditionalGeneration(cfg).to(device="cuda", dtype=torch.bfloat16)
model.model.audio_tower.requires_grad_(False)
model.model.language_model.gradient_checkpointing_enable(
    gradient_checkpointing_kwargs={"use_reentrant": False}
)
trainable = [p for p in model.parameters() if p.requires_grad]
print("trainable", sum(p.numel() for p in trainable))
opt = torch.optim.AdamW(trainable, lr=1e-5, weight_decay=0.0)
report("qwen3_asr_built_bf16")

FRAMES, PROMPT, TEXT = 3000, 8, 120
AUDIO_TOK = cfg.audio_token_id


def n_audio(frames):
    chunks, rest = divmod(frames, 100)
    assert rest == 0
    return chunks * 13


def batch(n):
    na = n_audio(FRAMES)
    ids = torch.randint(0, 151000, (n, PROMPT + na + TEXT))
    ids[:, PROMPT : PROMPT + na] = AUDIO_TOK
    labels = ids.clone()
    labels[:, : PROMPT + na] = -100
    feats = torch.randn(n, 128, FRAMES, dtype=torch.bfloat16)
    mask = torch.ones(n, FRAMES, dtype=torch.long)
    return ids.cuda(), labels.cuda(), feats.cuda(), mask.cuda()


model.train()
for step in range(5):
    ids, labels, feats, mask = batch(4)
    loss = model(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        input_features=feats,
        input_features_mask=mask,
        labels=labels,
    ).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 3))
report("asr_fine_tune")

model.eval()
with torch.no_grad():
    ids, labels, feats, mask = batch(4)
    out = model(
        input_ids=ids, attention_mask=torch.ones_like(ids), input_features=feats, input_features_mask=mask
    )
    print("eval", tuple(out.logits.shape))
    del out
report("no_grad_eval")

del opt, loss
# two clips: 30 s and 20 s (the second's last 1,000 frames padding), prompts left-padded to one length
lengths = [3000, 2000]
L = PROMPT + n_audio(3000) + 6
ids = torch.full((2, L), cfg.pad_token_id)
attn = torch.zeros(2, L, dtype=torch.long)
feats = torch.randn(2, 128, FRAMES, dtype=torch.bfloat16)
fmask = torch.zeros(2, FRAMES, dtype=torch.long)
for i, frames in enumerate(lengths):
    na = n_audio(frames)
    row = torch.randint(0, 151000, (PROMPT + na + 6,))
    row[PROMPT : PROMPT + na] = AUDIO_TOK
    ids[i, L - row.numel() :] = row
    attn[i, L - row.numel() :] = 1
    fmask[i, :frames] = 1
    feats[i, :, frames:] = 0
out = model.generate(
    input_ids=ids.cuda(),
    attention_mask=attn.cuda(),
    input_features=feats.cuda(),
    input_features_mask=fmask.cuda(),
    max_new_tokens=48,
    min_new_tokens=48,
    do_sample=False,
)
print("generated", tuple(out.shape))
report("generate_mixed_lengths")
