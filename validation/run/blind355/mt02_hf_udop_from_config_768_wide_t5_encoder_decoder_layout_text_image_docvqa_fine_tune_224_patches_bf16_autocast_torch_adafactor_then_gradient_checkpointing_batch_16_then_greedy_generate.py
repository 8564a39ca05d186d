"""Document question answering fine-tune of a UDOP model built from a UdopConfig (T5-style encoder-decoder
768 wide, 12 + 12 layers, 12 heads, FFN 3,072, vocabulary 33,201, 1d + horizontal + vertical relative
position biases, 224 x 224 page image cut into 16 x 16 patches whose embeddings are added to the OCR tokens
that lie in them; random init): UdopForConditionalGeneration given `input_ids`, `bbox` (normalized word
boxes, one per token), `pixel_values` and `labels`, its internal cross-entropy, in fp32 weights under bf16
autocast with `torch.optim.Adafactor` (factored second moments, no first moment).

Phases: 0 model and Adafactor; 1 three steps at batch 8 with 512 OCR tokens and 128 answer tokens;
2 `gradient_checkpointing_enable()` and three steps at batch 16; 3 `model.eval()`, no_grad + bf16 autocast
greedy `generate()` of 32 answer tokens (min == max) at batch 8. Seeded; no sizes depend on values."""

import os

import torch
from transformers import UdopConfig, UdopForConditionalGeneration

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3552)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    config = UdopConfig(vocab_size=500, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    B1, B2, B3, TEXT, ANSWER, NEW = 2, 3, 2, 40, 8, 5
else:
    config = UdopConfig(vocab_size=33201, d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_heads=12)
    B1, B2, B3, TEXT, ANSWER, NEW = 8, 16, 8, 512, 128, 32
config.decoder_start_token_id = 0


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


model = UdopForConditionalGeneration(config).to(device)
opt = torch.optim.Adafactor(model.parameters(), lr=1e-3)
print(f"parameters: {sum(p.numel() for p in model.parameters()):,}")
report("phase0 udop 768 + adafactor")


def page(batch):
    x0 = torch.rand(batch, TEXT, 1, device=device) * 0.9
    y0 = torch.rand(batch, TEXT, 1, device=device) * 0.95
    w = torch.rand(batch, TEXT, 1, device=device) * 0.08 + 0.01
    h = torch.full((batch, TEXT, 1), 0.015, device=device)
    return {
        "input_ids": torch.randint(3, config.vocab_size, (batch, TEXT), device=device),
        "attention_mask": torch.ones(batch, TEXT, dtype=torch.long, device=device),
        "bbox": torch.cat([x0, y0, x0 + w, y0 + h], -1),
        "pixel_values": torch.randn(batch, 3, 224, 224, device=device),
    }


def train(batch, tag):
    model.train()
    for step in range(3):
        inputs = page(batch)
        labels = torch.randint(3, config.vocab_size, (batch, ANSWER), device=device)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"{tag} step {step} loss {loss.item():.4f}")
    del loss


train(B1, "plain")
report(f"phase1 three steps at batch {B1}, {TEXT} tokens, bf16 autocast")

model.gradient_checkpointing_enable()
train(B2, "checkpointed")
report(f"phase2 gradient checkpointing, three steps at batch {B2}")

model.eval()
with torch.no_grad(), torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=cuda):
    out = model.generate(**page(B3), max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
print(f"answers: {tuple(out.shape)}")
del out
report(f"phase3 no_grad greedy generate, batch {B3} x {NEW} tokens")
