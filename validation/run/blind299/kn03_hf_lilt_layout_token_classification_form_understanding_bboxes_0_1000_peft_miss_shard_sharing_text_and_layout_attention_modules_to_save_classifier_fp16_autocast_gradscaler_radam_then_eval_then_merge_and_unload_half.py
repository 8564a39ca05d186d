"""Form understanding (FUNSD-style entity labelling) with a layout-aware encoder: a
LiltForTokenClassification from LiltConfig (12 layers of 768, 12 heads, layout stream shrunk by 4 to 192,
RoBERTa vocabulary 50,265, 7 BIO labels), input ids plus one normalised box per token (x0, y0, x1, y1 in
0..1000, tokens of a word sharing its box), padded to 512 with label -100 on padding and continuation
sub-tokens.

Adapted with peft's MiSS (MissConfig, r=64: one shared shard matrix per layer) on both attention streams
(query/value and layout_query/layout_value), the classifier in modules_to_save; fp32 weights under fp16
autocast with torch.amp.GradScaler and RAdam(foreach=True).
Phases: (1) model build + first step at batch 16; (2) three more steps; (3) evaluation under
inference_mode at batch 48 with token accuracy on labelled tokens; (4) merge_and_unload into the base
model, .half(), and the same evaluation in fp16, comparing predictions. 4 phases."""

import os

import torch
from peft import MissConfig, get_peft_model
from transformers import LiltConfig, LiltForTokenClassification

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29903)
if SMALL:
    cfg = LiltConfig(
        vocab_size=512,
        hidden_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=130,
        num_labels=7,
    )
    B, L, EVAL_B, R = 2, 64, 3, 8
else:
    cfg = LiltConfig(num_labels=7)
    B, L, EVAL_B, R = 16, 512, 48, 64
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def forms(n):
    """Words of 1-4 sub-tokens laid out in reading order on a page; one box per word."""
    ids = torch.full((n, L), cfg.pad_token_id, dtype=torch.long)
    boxes = torch.zeros((n, L, 4), dtype=torch.long)
    labels = torch.full((n, L), -100, dtype=torch.long)
    mask = torch.zeros((n, L), dtype=torch.long)
    for i in range(n):
        length = int(torch.randint(L // 2, L + 1, ()).item())
        ids[i, 0], ids[i, length - 1] = 0, 2  # <s> ... </s>
        mask[i, :length] = 1
        pos, x, y = 1, 20, 20
        while pos < length - 1:
            k = min(int(torch.randint(1, 5, ()).item()), length - 1 - pos)
            w = int(torch.randint(30, 160, ()).item())
            if x + w > 980:
                x, y = 20, min(y + 24, 960)
            ids[i, pos : pos + k] = torch.randint(3, cfg.vocab_size, (k,))
            boxes[i, pos : pos + k] = torch.tensor([x, y, x + w, y + 18])
            labels[i, pos] = int(torch.randint(0, cfg.num_labels, ()).item())
            pos, x = pos + k, x + w + 8
    return ids.to(device), boxes.to(device), mask.to(device), labels.to(device)


base = LiltForTokenClassification(cfg)
peft_cfg = MissConfig(
    r=R,
    target_modules=["query", "value", "layout_query", "layout_value"],
    modules_to_save=["classifier"],
)
model = get_peft_model(base, peft_cfg).to(device)
model.print_trainable_parameters()
opt = torch.optim.RAdam([p for p in model.parameters() if p.requires_grad], lr=5e-4, foreach=True)
scaler = torch.amp.GradScaler(device, enabled=device == "cuda")
model.train()

for step in range(4):
    ids, boxes, mask, labels = forms(B)
    with torch.autocast(device_type=device, dtype=torch.float16, enabled=device == "cuda"):
        out = model(input_ids=ids, bbox=boxes, attention_mask=mask, labels=labels)
    scaler.scale(out.loss).backward()
    scaler.unscale_(opt)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} scale {scaler.get_scale()}")
    del out
    if step == 0:
        report("build and first step")
report("miss adapter steps")


def evaluate(m, eval_batch, autocast):
    ids, boxes, mask, labels = eval_batch
    with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.float16, enabled=autocast):
        logits = m(input_ids=ids, bbox=boxes, attention_mask=mask).logits
        pred = logits.argmax(-1)
        kept = labels != -100
        acc = (pred[kept] == labels[kept]).float().mean().item()
    return pred, acc


model.eval()
eval_batch = forms(EVAL_B)
pred_adapter, acc = evaluate(model, eval_batch, device == "cuda")
print(f"adapter eval token accuracy {acc:.4f}")
report("adapter evaluation")

merged = model.merge_and_unload()
del model, opt, scaler
if device == "cuda":
    merged = merged.half()
pred_merged, acc = evaluate(merged, eval_batch, False)
print(f"merged fp16 accuracy {acc:.4f} agreement {(pred_merged == pred_adapter).float().mean().item():.4f}")
report("merged half evaluation")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
