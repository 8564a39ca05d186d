"""HF transformers ERNIE (BERT-style encoder with task-type embeddings) masked-language pre-training
built from a config at 12 layers, 768 wide, vocabulary 40,000, fp32 weights under bf16 autocast with
AdamW; the masking is drawn from a CUDA torch.Generator seeded per run (lengths between 256 and 512
by torch.randint, 15% of real tokens by torch.rand < 0.15, 80/10/10 replacement), and the MLM head
runs only on the masked positions (hidden[masked], then model.cls), as sparse-prediction recipes
do; batch 32 x 512, 3 steps, then the masked-token accuracy of a new batch under no_grad; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import ErnieConfig, ErnieForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(9706)
if SMALL:
    cfg = ErnieConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128
    )
    B, L, MIN = 4, 32, 16
else:
    cfg = ErnieConfig(
        vocab_size=40000,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
    )
    B, L, MIN = 32, 512, 256
cfg.use_task_id = True
MASK_ID = 3
device = "cuda" if torch.cuda.is_available() else "cpu"
gen = torch.Generator(device=device)
gen.manual_seed(1234)


def batch():
    lengths = torch.randint(MIN, L + 1, (B,), device=device, generator=gen)
    attn = (torch.arange(L, device=device)[None, :] < lengths[:, None]).long()
    ids = torch.randint(5, cfg.vocab_size, (B, L), device=device, generator=gen) * attn
    masked = (torch.rand(B, L, device=device, generator=gen) < 0.15) & attn.bool()
    r = torch.rand(B, L, device=device, generator=gen)
    inputs = torch.where(masked & (r < 0.8), torch.full_like(ids, MASK_ID), ids)
    rand_tok = torch.randint(5, cfg.vocab_size, (B, L), device=device, generator=gen)
    inputs = torch.where(masked & (r >= 0.8) & (r < 0.9), rand_tok, inputs)
    return inputs, attn, masked, ids[masked]


model = ErnieForMaskedLM(cfg).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
task = torch.zeros(B, L, dtype=torch.long, device=device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    inputs, attn, masked, targets = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        hidden = model.ernie(input_ids=inputs, attention_mask=attn, task_type_ids=task).last_hidden_state
        logits = model.cls(hidden[masked])
    loss = F.cross_entropy(logits.float(), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} masked {targets.numel()} loss {loss.item():.3f}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del hidden, logits, loss
model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
    inputs, attn, masked, targets = batch()
    hidden = model.ernie(input_ids=inputs, attention_mask=attn, task_type_ids=task).last_hidden_state
    acc = (model.cls(hidden[masked]).argmax(-1) == targets).float().mean()
if device == "cuda":
    print(
        f"eval {acc.item():.3f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
