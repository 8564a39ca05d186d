"""An HF ELECTRA-large discriminator (from ElectraConfig: 24 layers, width 1024) fine-tuned for
3-way classification under bf16 autocast with fused AdamW, the caching allocator's settings switched
at run time with torch.cuda.memory._set_allocator_settings between phases: training on three padded
lengths with the defaults, then "max_split_size_mb:256" for two more steps, then
"roundup_power2_divisions:4" for an eval over seven odd lengths under inference_mode, then
"expandable_segments:True" (after empty_cache) for two steps at length 512, switched back off at the
end; 6 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import ElectraConfig, ElectraForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(11904)
B = 2 if SMALL else 32
TRAIN_LENS = [32, 64, 48] if SMALL else [256, 384, 320]
SPLIT_LENS = [40, 56] if SMALL else [448, 288]
EVAL_LENS = [17, 33, 45, 29, 61, 23, 51] if SMALL else [137, 233, 411, 301, 509, 187, 367]
LONG = 64 if SMALL else 512
device = "cuda" if torch.cuda.is_available() else "cpu"

cfg = ElectraConfig(
    vocab_size=30522,
    embedding_size=128 if SMALL else 1024,
    hidden_size=128 if SMALL else 1024,
    num_hidden_layers=2 if SMALL else 24,
    num_attention_heads=4 if SMALL else 16,
    intermediate_size=256 if SMALL else 4096,
    num_labels=3,
)
model = ElectraForSequenceClassification(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=device == "cuda")


def settings(conf):
    if device == "cuda":
        torch.cuda.memory._set_allocator_settings(conf)


def batch(n, b=B):
    ids = torch.randint(1000, cfg.vocab_size, (b, n), device=device)
    lengths = torch.randint(n // 2, n + 1, (b,), device=device)
    mask = (torch.arange(n, device=device)[None] < lengths[:, None]).long()
    return ids * mask, mask, torch.randint(0, 3, (b,), device=device)


def train_step(n):
    ids, mask, y = batch(n)
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(input_ids=ids, attention_mask=mask).logits
    loss = F.cross_entropy(logits.float(), y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def report(what):
    if device == "cuda":
        print(
            f"{what} peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


report("model")
for n in TRAIN_LENS:
    loss = train_step(n)
report(f"default settings loss {loss:.3f}")
settings("max_split_size_mb:256")
for n in SPLIT_LENS:
    loss = train_step(n)
report(f"max_split_size_mb:256 loss {loss:.3f}")
settings("roundup_power2_divisions:4")
model.eval()
correct = 0
with torch.inference_mode(), torch.autocast(device, dtype=torch.bfloat16):
    for n in EVAL_LENS:
        ids, mask, y = batch(n, 2 * B)
        correct += int((model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == y).sum())
report(f"roundup_power2_divisions:4 eval correct {correct}")
model.train()
if device == "cuda":
    torch.cuda.empty_cache()
settings("expandable_segments:True")
for _ in range(2):
    loss = train_step(LONG)
report(f"expandable_segments loss {loss:.3f}")
settings("expandable_segments:False")
