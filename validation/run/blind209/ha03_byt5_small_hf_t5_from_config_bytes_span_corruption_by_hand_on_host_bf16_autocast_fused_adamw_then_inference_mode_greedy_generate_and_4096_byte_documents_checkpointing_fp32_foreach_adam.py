"""ByT5 (Xue et al. 2022): a token-free T5 over raw UTF-8 bytes, pre-trained by span corruption.

Model: transformers' T5ForConditionalGeneration from a T5Config at ByT5-small's shape (vocabulary 384 =
3 specials + 256 bytes + 125 sentinels, d_model 1472, gated-GELU FFN of 3584, 6 heads of 64, an encoder
of 12 layers and a decoder of 4: ByT5's 3:1 split, untied head). The text is random bytes (shifted by
3 as ByT5's tokenizer does); T5's span corruption is done by hand on the host as in T5's
`random_spans_noise_mask`: 15% of the bytes in spans of mean length 20, every span replaced by one
sentinel in the input, and the targets the spans each led by its sentinel, then EOS. The counts follow
the length only, so every example of a batch has the same input and target length.

Phases: the first step (bf16 autocast, fused AdamW, 12 x 1024 bytes); 2 more steps; greedy
`generate()` of exactly 128 bytes under inference_mode at batch 12; then 4,096-byte documents in fp32
(TF32 matmuls) with `gradient_checkpointing_enable()` and a foreach Adam at batch 3. 4 phases."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2093)
gen = torch.Generator().manual_seed(2093)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
torch.backends.cuda.matmul.allow_tf32 = True
if SMALL:
    D, FF, HEADS, ENC, DEC, LEN, BATCH, GEN = 64, 128, 2, 3, 1, 256, 2, 16
else:
    D, FF, HEADS, ENC, DEC, LEN, BATCH, GEN = 1472, 3584, 6, 12, 4, 1024, 12, 128
VOCAB, PAD, EOS, OFFSET = 384, 0, 1, 3
NOISE, MEAN_SPAN = 0.15, 20.0


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = T5Config(
    vocab_size=VOCAB,
    d_model=D,
    d_kv=64,
    d_ff=FF,
    num_layers=ENC,
    num_decoder_layers=DEC,
    num_heads=HEADS,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
    dropout_rate=0.1,
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
)
model = T5ForConditionalGeneration(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")


def random_segmentation(num_items, num_segments):
    """T5's _random_segmentation: num_items split into num_segments positive lengths."""
    marks = torch.zeros(num_items - 1, dtype=torch.long)
    marks[torch.randperm(num_items - 1, generator=gen)[: num_segments - 1]] = 1
    segment_id = torch.cat([torch.zeros(1, dtype=torch.long), marks.cumsum(0)])
    return torch.bincount(segment_id, minlength=num_segments)


def span_corruption(text):
    """One example: text is a 1-D byte tensor (ids already shifted by OFFSET)."""
    length = text.numel()
    num_noise = max(min(round(length * NOISE), length - 1), 1)
    num_spans = max(round(num_noise / MEAN_SPAN), 1)
    noise_lens = random_segmentation(num_noise, num_spans)
    keep_lens = random_segmentation(length - num_noise, num_spans)
    inputs, targets = [], []
    pos = 0
    for i in range(num_spans):
        sentinel = torch.tensor([VOCAB - 1 - i])
        inputs += [text[pos : pos + keep_lens[i]], sentinel]
        pos += int(keep_lens[i])
        targets += [sentinel, text[pos : pos + noise_lens[i]]]
        pos += int(noise_lens[i])
    inputs.append(torch.tensor([EOS]))
    targets.append(torch.tensor([EOS]))
    return torch.cat(inputs), torch.cat(targets)


def batch(n, length):
    pairs = [span_corruption(torch.randint(0, 256, (length,), generator=gen) + OFFSET) for _ in range(n)]
    inputs = torch.stack([p[0] for p in pairs]).to(device)
    targets = torch.stack([p[1] for p in pairs]).to(device)
    return inputs, targets


opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0, fused=amp)
model.train()
for step in range(3):
    inputs, targets = batch(BATCH, LEN)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = model(input_ids=inputs, attention_mask=torch.ones_like(inputs), labels=targets).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} inputs {tuple(inputs.shape)} targets {tuple(targets.shape)} loss {loss.item():.4f}")
    if step == 0:
        report("first step")
report("train")

model.eval()
inputs, _ = batch(BATCH, LEN)
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    out = model.generate(input_ids=inputs, max_new_tokens=GEN, min_new_tokens=GEN, do_sample=False)
print(f"generated {tuple(out.shape)}")
del out, inputs
report("generate")

del opt
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.Adam(model.parameters(), lr=5e-4, foreach=True)
for step in range(2):
    inputs, targets = batch(max(BATCH // 4, 1), 4 * LEN)
    loss = model(input_ids=inputs, labels=targets).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"fp32 checkpointed step {step} inputs {tuple(inputs.shape)} loss {loss.item():.4f}")
report("4096 bytes fp32 checkpointed")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
