"""Byte-level masked-language-model pretraining with the Reformer at long length, as the Reformer examples do,
with the weights random: a ReformerForMaskedLM from a ReformerConfig (bidirectional, `is_decoder=False`; 6
layers all of LSH self-attention, 512 wide with 8 heads of 64, chunks of 64, factorized buckets [32, 16] = 512
buckets, 4 hash rounds; axial position embeddings of shape (128, 128); reversible residual layers whose custom
autograd Function recomputes each layer in backward; feed-forward chunked by 2,048 positions and the LM head
by 4,096). 15% of the 16,384 byte positions are masked with id 2 and carry labels (-100 elsewhere).

Phases: 0 the model in fp32; 1 training at batch 2 of 16,384 bytes under bf16 autocast with
torch.optim.Adafactor, 2 steps (the reversible backward recomputes outside the autocast region, as PyTorch
runs backward); 2 eval in fp32 under `inference_mode` at batch 2 of 16,384 with 8 hash rounds (`num_hashes=8`
passed to forward), the predicted bytes at the masked positions kept as a full argmax; 3 the model `.half()`,
`inference_mode` over batch 8 of 16,384 with the configured 4 hash rounds. Seeded; the LSH sort changes no
shape."""

import os

import torch
from transformers import ReformerConfig, ReformerForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3624)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = ReformerConfig(
        vocab_size=64,
        hidden_size=32,
        attention_head_size=8,
        num_attention_heads=2,
        attn_layers=["lsh", "lsh"],
        axial_pos_shape=(8, 16),
        axial_pos_embds_dim=(8, 24),
        feed_forward_size=64,
        lsh_attn_chunk_length=16,
        num_buckets=[4, 4],
        num_hashes=2,
        chunk_size_feed_forward=32,
        chunk_size_lm_head=64,
        is_decoder=False,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
    )
    B1, B2, B3, L, EVAL_HASHES = 2, 2, 3, 128, 4
else:
    config = ReformerConfig(
        vocab_size=320,
        hidden_size=512,
        attention_head_size=64,
        num_attention_heads=8,
        attn_layers=["lsh"] * 6,
        axial_pos_shape=(128, 128),
        axial_pos_embds_dim=(128, 384),
        feed_forward_size=2048,
        lsh_attn_chunk_length=64,
        num_buckets=[32, 16],
        num_hashes=4,
        chunk_size_feed_forward=2048,
        chunk_size_lm_head=4096,
        is_decoder=False,
        max_position_embeddings=16384,
        hidden_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0,
    )
    B1, B2, B3, L, EVAL_HASHES = 2, 2, 8, 16384, 8


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


def make_batch(batch):
    ids = torch.randint(3, config.vocab_size, (batch, L), device=device)
    masked = torch.rand(batch, L, device=device) < 0.15
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    ids = ids.masked_fill(masked, 2)
    return ids, labels, masked


model = ReformerForMaskedLM(config).to(device)
optimizer = torch.optim.Adafactor(model.parameters(), lr=1e-3)
print(f"parameters {sum(p.numel() for p in model.parameters()):,}")
report("phase0 reformer mlm fp32")

model.train()
for step in range(2):
    ids, labels, _ = make_batch(B1)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids, labels=labels)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} logits {out.logits.dtype}")
    del out
report(f"phase1 bf16 autocast reversible adafactor batch {B1}x{L}")

del optimizer
model.eval()
with torch.inference_mode():
    ids, labels, masked = make_batch(B2)
    logits = model(input_ids=ids, num_hashes=EVAL_HASHES).logits
    predicted = logits.argmax(-1)
    accuracy = (predicted[masked] == labels[masked]).float().mean()
    print(f"eval {EVAL_HASHES} hashes masked accuracy {accuracy.item():.4f}")
    del logits
report(f"phase2 fp32 eval inference_mode {EVAL_HASHES} hashes batch {B2}x{L}")

del predicted
model.half()
with torch.inference_mode():
    ids, labels, masked = make_batch(B3)
    logits = model(input_ids=ids).logits
    predicted = logits.argmax(-1)
    print(f"fp16 logits {tuple(logits.shape)} {logits.dtype}")
report(f"phase3 fp16 half inference_mode batch {B3}x{L}")
