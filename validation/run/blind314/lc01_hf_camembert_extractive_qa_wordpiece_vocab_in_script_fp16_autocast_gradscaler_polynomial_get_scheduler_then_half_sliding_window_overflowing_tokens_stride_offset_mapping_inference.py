"""Extractive question answering with HF CamemBERT (model_type "camembert"): CamembertForQuestionAnswering
from a base-sized config (768 wide, 12 layers) over a WordPiece tokenizer built in the script from an
in-memory vocabulary (BertTokenizer(vocab=...), 6,000 words and 1,000 "##" suffixes). SQuAD-style
training without Trainer: question/context pairs truncated to 384 tokens ("only_second"), start and end
token positions of an answer span inside the context, fp16 autocast with a GradScaler, AdamW and
get_scheduler("polynomial", power 2) with warmup, 4 steps of 24 pairs. Then the model in half precision
on long contexts split into 384-token windows overlapping by 128 (the HF course's post-processing:
return_overflowing_tokens with stride, offset mappings, overflow_to_sample_mapping), 6 windows a batch under
inference_mode, the best span of each question from the 20 best start and end logits of its windows.

Phases: 0 model and optimizer built; 1 first step; 2 three more steps; 3 half-precision windowed QA
inference."""

import random

import torch
from transformers import BertTokenizer, CamembertConfig, CamembertForQuestionAnswering, get_scheduler

random.seed(314)
torch.manual_seed(314)
device = "cuda"

specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
words = [f"w{i}" for i in range(6000)]
suffixes = [f"##x{i}" for i in range(1000)]
tokenizer = BertTokenizer(vocab={t: i for i, t in enumerate(specials + words + suffixes)})


def text(n_words):
    out = []
    for _ in range(n_words):
        w = random.choice(words)
        if random.random() < 0.3:
            w += random.choice(suffixes)[2:]
        out.append(w)
    return " ".join(out)


config = CamembertConfig(
    vocab_size=len(tokenizer),
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=514,
    pad_token_id=tokenizer.pad_token_id,
)
model = CamembertForQuestionAnswering(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01)
steps = 4
scheduler = get_scheduler(
    "polynomial",
    optimizer,
    num_warmup_steps=1,
    num_training_steps=steps,
    scheduler_specific_kwargs={"power": 2.0, "lr_end": 1e-7},
)
scaler = torch.amp.GradScaler("cuda")
torch.cuda.reset_peak_memory_stats()


def batch(n):
    questions = [text(random.randint(6, 14)) for _ in range(n)]
    contexts = [text(random.randint(150, 400)) for _ in range(n)]
    enc = tokenizer(
        questions, contexts, truncation="only_second", max_length=384, padding="longest", return_tensors="pt"
    )
    seq_ids = [enc.sequence_ids(i) for i in range(n)]
    starts, ends = [], []
    for ids in seq_ids:
        ctx = [j for j, s in enumerate(ids) if s == 1]
        a = random.randint(ctx[0], ctx[-1] - 5)
        starts.append(a)
        ends.append(a + random.randint(0, 4))
    enc.pop("token_type_ids", None)
    enc["start_positions"] = torch.tensor(starts)
    enc["end_positions"] = torch.tensor(ends)
    return {k: v.to(device) for k, v in enc.items()}


model.train()
for step in range(steps):
    inputs = batch(24)
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(**inputs)
    scaler.scale(out.loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f} lr {scheduler.get_last_lr()[0]:.2e}")
    del out, inputs
    if step == 0:
        torch.cuda.reset_peak_memory_stats()
torch.cuda.reset_peak_memory_stats()

del optimizer, scaler
model.eval().half()
questions = [text(8) for _ in range(8)]
contexts = [text(random.randint(600, 1200)) for _ in range(8)]
enc = tokenizer(
    questions,
    contexts,
    truncation="only_second",
    max_length=384,
    stride=128,
    return_overflowing_tokens=True,
    return_offsets_mapping=True,
    padding="max_length",
    return_tensors="pt",
)
sample_of = enc.pop("overflow_to_sample_mapping").tolist()
offsets = enc.pop("offset_mapping").tolist()
enc.pop("token_type_ids", None)
print(f"{len(sample_of)} windows")
starts, ends = [], []
with torch.inference_mode():
    for i in range(0, len(sample_of), 6):
        out = model(
            input_ids=enc["input_ids"][i : i + 6].to(device),
            attention_mask=enc["attention_mask"][i : i + 6].to(device),
        )
        starts.append(out.start_logits.float().cpu())
        ends.append(out.end_logits.float().cpu())
starts, ends = torch.cat(starts), torch.cat(ends)
best = {}
for w, q in enumerate(sample_of):
    ctx = [j for j, s in enumerate(enc.sequence_ids(w)) if s == 1]
    for a in starts[w].topk(20).indices.tolist():
        for b in ends[w].topk(20).indices.tolist():
            if ctx[0] <= a <= b < a + 30 and b <= ctx[-1]:
                score = float(starts[w, a] + ends[w, b])
                if q not in best or score > best[q][0]:
                    best[q] = (score, offsets[w][a][0], offsets[w][b][1])
for q in sorted(best):
    print(f"question {q}: chars {best[q][1]}-{best[q][2]} score {best[q][0]:.3f}")
torch.cuda.reset_peak_memory_stats()
