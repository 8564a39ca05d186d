"""T5 v1.1 base (Raffel et al. 2020, with the v1.1 changes: gated-GELU feed-forward, no dropout during
pre-training, an untied lm_head) built from a T5Config with no downloads: d_model 768, 12 encoder and 12
decoder layers, 12 heads of 64, d_ff 2,048, vocabulary 32,128, 32 relative-attention buckets (max
distance 128). Span-corruption-style denoising batches made on the host the way a seqio/t5 data pipeline
hands them over: 512 input tokens with sentinel ids (32,099 down) replacing ~15% of the tokens in spans of
3, and 114 target tokens (sentinel + span, ended by EOS 1), moved to the GPU. fp32 training (TF32 matmuls
allowed) with transformers.optimization.Adafactor in its paper setting (scale_parameter, relative_step,
warmup_init, lr=None; factored second moments, no first moment) at batch 24: the first step its own phase,
then 3 steps; then evaluation under no_grad: the teacher-forced loss at batch 48, and `generate()` with a
4-beam search (length_penalty 0.6, 40 new tokens, min_new_tokens 40 so that EOS never ends a beam early)
at batch 16 over 512-token inputs; 4 phases."""

import os

import torch
from transformers import T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18501)
if SMALL:
    D, FF, L, H, VOCAB = 64, 128, 2, 4, 1000
    B, STEPS, EVAL_B, BEAM_B, SRC, TGT, GEN = 2, 2, 2, 2, 64, 16, 4
else:
    D, FF, L, H, VOCAB = 768, 2048, 12, 12, 32128
    B, STEPS, EVAL_B, BEAM_B, SRC, TGT, GEN = 24, 4, 48, 16, 512, 114, 40
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
PAD, EOS = 0, 1
SENTINEL0 = VOCAB - 29  # <extra_id_0>, counting down

config = T5Config(
    vocab_size=VOCAB,
    d_model=D,
    d_kv=64 if not SMALL else 16,
    d_ff=FF,
    num_layers=L,
    num_decoder_layers=L,
    num_heads=H,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    dropout_rate=0.0,
    feed_forward_proj="gated-gelu",
    tie_word_embeddings=False,
    pad_token_id=PAD,
    eos_token_id=EOS,
    decoder_start_token_id=PAD,
)
model = T5ForConditionalGeneration(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters())}")


def span_corruption_batch(bs):
    """Host-side denoising batch: sentinels replace spans of 3 in the inputs, the targets list them."""
    inputs = torch.randint(32, SENTINEL0 - 100, (bs, SRC))
    targets = torch.full((bs, TGT), PAD, dtype=torch.long)
    n_spans = (SRC * 15 // 100) // 3
    for i in range(bs):
        starts = torch.randperm(SRC // 4 - 1)[:n_spans].sort().values * 4
        pieces = []
        for k, s in enumerate(starts.tolist()):
            pieces.append(torch.tensor([SENTINEL0 - k]))
            pieces.append(inputs[i, s : s + 3].clone())
            inputs[i, s : s + 3] = PAD
            inputs[i, s] = SENTINEL0 - k
        tgt = torch.cat([*pieces, torch.tensor([EOS])])[:TGT]
        targets[i, : tgt.numel()] = tgt
    inputs[:, -1] = EOS
    labels = targets.masked_fill(targets == PAD, -100)
    attention_mask = torch.ones_like(inputs)
    return inputs.to(device), attention_mask.to(device), labels.to(device)


optimizer = Adafactor(model.parameters(), lr=None, scale_parameter=True, relative_step=True, warmup_init=True)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    input_ids, attention_mask, labels = span_corruption_batch(B)
    loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del loss
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
with torch.no_grad():
    input_ids, attention_mask, labels = span_corruption_batch(EVAL_B)
    val = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    print(f"val loss {val.loss.item():.4f} logits {tuple(val.logits.shape)}")
    del val
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

with torch.no_grad():
    beams = model.generate(
        input_ids=input_ids[:BEAM_B],
        attention_mask=attention_mask[:BEAM_B],
        num_beams=4,
        length_penalty=0.6,
        max_new_tokens=GEN,
        min_new_tokens=GEN,
        early_stopping=True,
    )
print(f"beam {tuple(beams.shape)}")
if device == "cuda":
    print(
        f"beam allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
