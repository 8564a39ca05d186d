"""BERT-large masked-language-model pretraining from transformers 5.17 (`BertForMaskedLM` from a `BertConfig`:
24 layers of 1,024, 16 heads, 512 tokens, vocabulary 30,522; 335M parameters), fp32 weights under fp16
autocast with `torch.amp.GradScaler` and AdamW, on a card shared with other jobs:
`set_per_process_memory_fraction` leaves it 12.5 GiB. Every sequence masks 76 fixed-count random positions
(15% of 512, chosen by `argsort` of `torch.rand`, so the count never depends on values).

The first try passes `labels=` (-100 except at the masked positions) at batch 32: the head scores all 512
positions over the whole vocabulary. It runs out of memory; the `for micro in (32, 16, 8, 4)` loop catches
`torch.OutOfMemoryError`, cleans up outside the `except` (`zero_grad(set_to_none=True)`, `gc.collect()`,
`torch.cuda.empty_cache()`) and tries half the micro-batch with twice the accumulation steps (the scaler
scales `loss / accum` each time, one `scaler.step` per 32 sequences) until a step succeeds.

Then the fixes: the encoder's hidden states are gathered at the masked positions only and `model.cls` scores
those rows (32 x 76 instead of 32 x 512); HF gradient checkpointing is enabled
(`gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})`) and switched off
again on every even layer (`layer.gradient_checkpointing = False`), so every other layer is checkpointed;
then checkpointing off and the lower 12 layers' forwards wrapped in
`torch.autograd.graph.save_on_cpu(pin_memory=True)`.

Phases: 0 model, AdamW, GradScaler; 1 batch 32 with full-vocabulary logits (OOM) and the halving loop until an
accumulated step fits; 2 one more step at that micro-batch; 3 two steps at 16 x 2 with the masked-rows head
and every other layer checkpointed; 4 two steps at 16 x 2 with the masked-rows head and the lower half's
saved tensors in pinned host memory; 5 evaluation under `no_grad` at 64 (masked rows only). Seeded."""

import gc
import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(349_05)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, L, H, FF, T, B = 1000, 64, 4, 4, 256, 64, 8
else:
    V, D, L, H, FF, T, B = 30522, 1024, 24, 16, 4096, 512, 32
N_MASK = int(0.15 * T)
CAP_BYTES = 25 * 2**29


def report(tag):
    if cuda:
        s = torch.cuda.memory_stats()
        print(
            f"{tag}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
            f"memory_allocated {torch.cuda.memory_allocated()} "
            f"max_memory_reserved {torch.cuda.max_memory_reserved()} num_ooms {s.get('num_ooms', 0)}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


if cuda:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(CAP_BYTES / total)

config = BertConfig(
    vocab_size=V,
    hidden_size=D,
    num_hidden_layers=L,
    num_attention_heads=H,
    intermediate_size=FF,
    max_position_embeddings=T,
    attn_implementation="sdpa",
)
model = BertForMaskedLM(config).to(device)
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
scaler = torch.amp.GradScaler(device)
print(f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
report("BERT-large MLM, AdamW, GradScaler")


def mlm_batch(n):
    ids = torch.randint(V // 30, V, (n, T), device=device)
    pos = torch.rand(n, T, device=device).argsort(dim=-1)[:, :N_MASK]
    targets = ids.gather(1, pos)
    ids = ids.scatter(1, pos, 103)
    attn = torch.ones(n, T, dtype=torch.long, device=device)
    attn[n // 2 :, T - T // 8 :] = 0
    return ids, attn, pos, targets


def full_logits_loss(ids, attn, pos, targets):
    labels = torch.full_like(ids, -100).scatter_(1, pos, targets)
    return model(input_ids=ids, attention_mask=attn, labels=labels).loss


def masked_rows_loss(ids, attn, pos, targets):
    hidden = model.bert(input_ids=ids, attention_mask=attn).last_hidden_state
    rows = hidden.gather(1, pos.unsqueeze(-1).expand(-1, -1, D))
    logits = model.cls(rows)
    return F.cross_entropy(logits.float().view(-1, V), targets.reshape(-1))


def step(loss_fn, micro, accum):
    for _ in range(accum):
        batch = mlm_batch(micro)
        with torch.autocast(device, dtype=torch.float16):
            loss = loss_fn(*batch) / accum
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return loss.item() * accum


fit = None
for micro in (B, B // 2, B // 4, B // 8):
    oom = False
    try:
        loss = step(full_logits_loss, micro, B // micro)
        fit = micro
    except torch.OutOfMemoryError:
        oom = True
        print(f"OOM at micro-batch {micro}")
    if oom:
        optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
    else:
        print(f"micro-batch {micro} x {B // micro} fits: loss {loss:.3f}")
        break
if fit is None:
    raise SystemExit("nothing fits")
report("full-vocabulary logits: OOM, halving loop")

loss = step(full_logits_loss, fit, B // fit)
report(f"one more step at micro-batch {fit}")

model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for i, layer in enumerate(model.bert.encoder.layer):
    if i % 2 == 0:
        layer.gradient_checkpointing = False
for _ in range(2):
    loss = step(masked_rows_loss, B // 2, 2)
    print(f"masked rows, every other layer checkpointed: loss {loss:.3f}")
report("masked-position head, every other layer checkpointed, 16 x 2")

model.gradient_checkpointing_disable()


def offloaded(forward):
    def run(*args, **kwargs):
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            return forward(*args, **kwargs)

    return run


for layer in model.bert.encoder.layer[: L // 2]:
    layer.forward = offloaded(layer.forward)
for _ in range(2):
    loss = step(masked_rows_loss, B // 2, 2)
    print(f"masked rows, lower half saved on CPU: loss {loss:.3f}")
report("masked-position head, save_on_cpu(pin_memory=True) on the lower 12 layers, 16 x 2")

model.eval()
with torch.no_grad(), torch.autocast(device, dtype=torch.float16):
    val = masked_rows_loss(*mlm_batch(2 * B))
print(f"eval loss {val.item():.3f}")
report("evaluation under no_grad at 64")
