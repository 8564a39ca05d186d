"""A Hugging Face BERT classifier fine-tuned with `torch.compile`, as a GLUE-style script with
`torch_compile=True` and padding to a fixed length runs it: a 6-layer BERT from its config (hidden 768,
12 heads, SDPA, 8 labels), fp32 weights, `torch.compile(model)`, bf16 autocast, fused
AdamW with a linear warmup schedule, batch 32 padded to 128 tokens (attention mask with padding),
2 steps; then 2 steps at 256 tokens (the second length: dynamo recompiles with the sequence
dynamic); then evaluation in `eval()` under `torch.inference_mode()` and autocast at batch 64 x 256.
No value-dependent sizes (masks fixed by position). 4 phases."""

import torch
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

torch.manual_seed(2456)
V, L = 30522, 8


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = BertConfig(num_hidden_layers=6, num_labels=L, attn_implementation="sdpa")
model = BertForSequenceClassification(cfg).cuda()
compiled = torch.compile(model)
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)
report("setup")


def batch(b, t):
    ids = torch.randint(1000, V, (b, t), device="cuda")
    mask = torch.ones(b, t, dtype=torch.long, device="cuda")
    mask[b // 2 :, 3 * t // 4 :] = 0  # half the batch padded on its last quarter
    ids = ids * mask
    labels = torch.randint(0, L, (b,), device="cuda")
    return ids, mask, labels


def train_step(t):
    ids, mask, labels = batch(32, t)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = compiled(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=True)


model.train()
for _ in range(2):
    train_step(128)
report("train_len128")

for _ in range(2):
    train_step(256)
report("train_len256_dynamic_recompile")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    ids, mask, _ = batch(64, 256)
    preds = compiled(input_ids=ids, attention_mask=mask).logits.argmax(-1)
    del ids, mask
report("eval_inference_mode")
