"""SWAG-style multiple choice with HF I-BERT (model_type "ibert", quant_mode off: the float RoBERTa path):
IBertForMultipleChoice from a base-sized config (768 wide, 12 layers) over a WordPiece tokenizer built in
the script. Each example is a context sentence and four candidate endings, tokenized as pairs without
padding and batched by transformers' DataCollatorForMultipleChoice (pads the flattened choices to the
longest, a multiple of 8, and reshapes to batch x 4 x length). Trainer-free loop: bf16 autocast, AdamW,
get_wsd_schedule (linear warmup, stable plateau, cosine decay), 5 steps of 16 examples. Then choice accuracy
under inference_mode on batches of 32, and one batch padded to a fixed 192 tokens (padding="max_length").

Phases: 0 model built; 1 first step; 2 four more steps; 3 inference batches; 4 max_length padded batch."""

import random

import torch
from transformers import (
    BertTokenizer,
    DataCollatorForMultipleChoice,
    IBertConfig,
    IBertForMultipleChoice,
    get_wsd_schedule,
)

random.seed(3142)
torch.manual_seed(3142)
device = "cuda"

specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
words = [f"t{i}" for i in range(9000)]
tokenizer = BertTokenizer(vocab={t: i for i, t in enumerate(specials + words)})


def sentence(lo, hi):
    return " ".join(random.choice(words) for _ in range(random.randint(lo, hi)))


def features(n):
    out = []
    for _ in range(n):
        context = sentence(20, 60)
        endings = [sentence(5, 40) for _ in range(4)]
        enc = tokenizer([context] * 4, endings, truncation=True, max_length=160)
        item = {k: v for k, v in enc.items() if k != "token_type_ids"}
        item["labels"] = random.randint(0, 3)
        out.append(item)
    return out


config = IBertConfig(
    vocab_size=len(tokenizer),
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=514,
    pad_token_id=tokenizer.pad_token_id,
    quant_mode=False,
)
model = IBertForMultipleChoice(config).to(device)
collator = DataCollatorForMultipleChoice(tokenizer, pad_to_multiple_of=8)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, betas=(0.9, 0.98), eps=1e-6)
steps = 5
scheduler = get_wsd_schedule(optimizer, num_warmup_steps=1, num_decay_steps=2, num_training_steps=steps)
torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(steps):
    batch = {k: v.to(device) for k, v in collator(features(16)).items()}
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(**batch)
    out.loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} shape {tuple(batch['input_ids'].shape)} loss {out.loss.item():.4f}")
    del out, batch
    if step == 0:
        torch.cuda.reset_peak_memory_stats()
torch.cuda.reset_peak_memory_stats()

model.eval()
correct = total = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(3):
        batch = {k: v.to(device) for k, v in collator(features(32)).items()}
        pred = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.argmax(-1)
        correct += int((pred == batch["labels"]).sum())
        total += pred.numel()
print(f"choice accuracy {correct / total:.3f}")
torch.cuda.reset_peak_memory_stats()

fixed = DataCollatorForMultipleChoice(tokenizer, padding="max_length", max_length=192)
batch = {k: v.to(device) for k, v in fixed(features(32)).items()}
with torch.inference_mode():
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
print(f"fp32 logits {tuple(logits.shape)} mean {logits.float().mean().item():.4f}")
torch.cuda.reset_peak_memory_stats()
