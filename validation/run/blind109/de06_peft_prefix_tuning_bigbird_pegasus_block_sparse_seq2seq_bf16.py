"""PEFT prefix tuning (64 virtual tokens, a 2-layer reparametrizing MLP over the prefix) on HF
BigBird-Pegasus built from a config: a block-sparse encoder (blocks of 64, 3 random blocks) over
2,048-token sources and a full-attention decoder, 6 + 6 layers of 768 wide, a 32,000-symbol
vocabulary; the base model frozen, all in bf16 (the block-sparse path rebuilds the full
attention-probability matrix in the context's dtype, so no autocast), AdamW on the prefix
encoder, batches of 4 documents with 192-token summaries (padding labels -100), 3 steps, then a
no_grad loss over 8; 5 phases."""

import os

import torch
from peft import PrefixTuningConfig, TaskType, get_peft_model
from transformers import BigBirdPegasusConfig, BigBirdPegasusForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10906)
device = "cuda" if torch.cuda.is_available() else "cpu"
V = 500 if SMALL else 32000
S, T, B = (512, 16, 2) if SMALL else (2048, 192, 4)
cfg = BigBirdPegasusConfig(
    vocab_size=V,
    d_model=64 if SMALL else 768,
    encoder_layers=2 if SMALL else 6,
    decoder_layers=2 if SMALL else 6,
    encoder_attention_heads=4 if SMALL else 12,
    decoder_attention_heads=4 if SMALL else 12,
    encoder_ffn_dim=128 if SMALL else 3072,
    decoder_ffn_dim=128 if SMALL else 3072,
    max_position_embeddings=S,
    attention_type="block_sparse",
    block_size=64,
    num_random_blocks=3,
    pad_token_id=0,
    eos_token_id=1,
    decoder_start_token_id=2,
    bos_token_id=2,
)
model = BigBirdPegasusForConditionalGeneration(cfg).to(device, torch.bfloat16)
model = get_peft_model(
    model,
    PrefixTuningConfig(
        task_type=TaskType.SEQ_2_SEQ_LM,
        num_virtual_tokens=64 if not SMALL else 8,
        prefix_projection=True,
        encoder_hidden_size=512 if not SMALL else 32,
    ),
)
model.train()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=3e-3)


def batch(b):
    ids = torch.randint(3, V, (b, S))
    labels = torch.randint(3, V, (b, T))
    for i in range(b):
        labels[i, T - 7 * (i + 1) :] = -100
    return ids.to(device), torch.ones(b, S, dtype=torch.long, device=device), labels.to(device)


if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
for step in range(3):
    ids, mask, labels = batch(B)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del ids, mask, labels, loss
model.eval()
with torch.no_grad():
    ids, mask, labels = batch(2 * B)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
if device == "cuda":
    print(
        f"eval {loss.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
