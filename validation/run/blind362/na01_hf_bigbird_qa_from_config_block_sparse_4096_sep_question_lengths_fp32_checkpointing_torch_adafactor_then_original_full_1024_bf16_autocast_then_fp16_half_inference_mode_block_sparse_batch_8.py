"""Extractive question answering on long documents with BigBird as the Hugging Face BigBird QA examples do,
with the weights random: a BigBirdForQuestionAnswering from a BigBirdConfig (768 wide, 12 layers, 4,096
positions, block-sparse attention with blocks of 64, 3 random blocks per row, global first and last blocks).
The question is the first 64 tokens, ended by the [SEP] id, so the model finds `question_lengths` itself
(argmax of input_ids == sep_token_id) and masks the question out of the start/end logits.

Phases: 0 the model in fp32 with gradient checkpointing on; 1 fine-tuning at batch 2 of 4,096 tokens in fp32
with torch.optim.Adafactor, 2 steps (block-sparse attention, every layer recomputed in backward); 2
checkpointing off and the encoder switched to `original_full` attention (`model.bert.set_attention_type`), two
steps at batch 4 of 1,024 tokens under bf16 autocast with the same Adafactor; 3 back to block-sparse, the
model `.half()` and eval, `inference_mode` over batch 8 of 4,096 tokens, the start/end logits and the argmax
spans kept. Seeded; BigBird's random blocks come from numpy and change no shape. Block-sparse attention is not
run under autocast: transformers 5.17 rebuilds the full attention-probability matrix with `scatter_` of the
fp32 softmax into a tensor of the (bf16) context's dtype, which raises a dtype error under autocast."""

import os

import numpy as np
import torch
from transformers import BigBirdConfig, BigBirdForQuestionAnswering

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3621)
np.random.seed(3621)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = BigBirdConfig(
        vocab_size=200,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=1024,
        block_size=16,
        num_random_blocks=2,
    )
    B1, L1, B2, L2, B3, Q = 1, 512, 2, 128, 2, 16
else:
    config = BigBirdConfig(max_position_embeddings=4096, block_size=64, num_random_blocks=3)
    B1, L1, B2, L2, B3, Q = 2, 4096, 4, 1024, 8, 64
SEP = config.sep_token_id


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


def make_batch(batch, length):
    ids = torch.randint(5, config.vocab_size, (batch, length), device=device)
    ids[:, 0] = config.bos_token_id
    ids[:, Q - 1] = SEP
    ids[:, -1] = SEP
    start = torch.randint(Q, length - 64, (batch,), device=device)
    end = start + torch.randint(1, 32, (batch,), device=device)
    return ids, start, end


model = BigBirdForQuestionAnswering(config).to(device)
model.gradient_checkpointing_enable()
model.train()
optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3)
print(f"parameters {sum(p.numel() for p in model.parameters()):,} attention {model.config.attention_type}")
report("phase0 bigbird qa fp32 checkpointing on")

for step in range(2):
    ids, start, end = make_batch(B1, L1)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids), start_positions=start, end_positions=end)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} start_logits {tuple(out.start_logits.shape)}")
    del out
report(f"phase1 block_sparse fp32 checkpointed adafactor batch {B1}x{L1}")

model.gradient_checkpointing_disable()
model.bert.set_attention_type("original_full")
for step in range(2):
    ids, start, end = make_batch(B2, L2)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(
            input_ids=ids, attention_mask=torch.ones_like(ids), start_positions=start, end_positions=end
        )
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"original_full step {step} loss {out.loss.item():.4f}")
    del out
report(f"phase2 original_full bf16 autocast adafactor batch {B2}x{L2}")

model.bert.set_attention_type("block_sparse")
del optimizer
model.half().eval()
with torch.inference_mode():
    ids, _, _ = make_batch(B3, L1)
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    spans = torch.stack([out.start_logits.argmax(-1), out.end_logits.argmax(-1)], dim=-1)
    kept = (out.start_logits, out.end_logits, spans)
    print(f"spans {tuple(spans.shape)} logits {out.start_logits.dtype}")
    del out
report(f"phase3 fp16 half inference_mode block_sparse batch {B3}x{L1}")
