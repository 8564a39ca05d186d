"""Masked-LM pretraining of a small HF XLM (XLMWithLMHeadModel, one language, no language embeddings)
the way the HF "language-modeling" examples do it without Trainer: a WordPiece BertTokenizer built in
memory from a syllable vocabulary (whole two-syllable words plus "##" continuation pieces), a text corpus
generated with a seeded random, batches tokenized with return_offsets_mapping and fed through
DataCollatorForLanguageModeling(whole_word_mask=True) (v5 finds word boundaries from the offsets, masks
every piece of a chosen word), moved to the GPU per step. AdamW with transformers.get_scheduler
("cosine_with_restarts", two cycles after warmup), bf16 autocast, grad-norm clipping.

Phases: 0 tokenizer, model and optimizer built; 1 MLM training steps; 2 masked-LM eval on held-out batches
under no_grad; 3 sentence embeddings (the [CLS] hidden state of the base transformer) for the eval
corpus in fp16, cosine-similarity matrix and top-5 neighbours."""

import random

import torch
from transformers import (
    BertTokenizerFast,
    DataCollatorForLanguageModeling,
    XLMConfig,
    XLMWithLMHeadModel,
    get_scheduler,
)

torch.manual_seed(3062)
random.seed(3062)
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


cons, vows = "bcdfghjklmnprstvwz", "aeiou"
syl = [c + v for c in cons for v in vows]
words2 = sorted({random.choice(syl) + random.choice(syl) for _ in range(6000)})
vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + syl + ["##" + s for s in syl] + words2
tokenizer = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)})


def sentence():
    n = random.randint(60, 140)
    return " ".join("".join(random.choice(syl) for _ in range(random.randint(1, 4))) for _ in range(n))


train_texts = [sentence() for _ in range(24 * 12)]
eval_texts = [sentence() for _ in range(24 * 4)]

config = XLMConfig(
    vocab_size=len(tokenizer),
    emb_dim=768,
    n_layers=10,
    n_heads=12,
    max_position_embeddings=512,
    n_langs=1,
    use_lang_emb=False,
    causal=False,
    dropout=0.1,
    attention_dropout=0.1,
    pad_index=tokenizer.pad_token_id,
    mask_token_id=tokenizer.mask_token_id,
)
model = XLMWithLMHeadModel(config).to(device)
collator = DataCollatorForLanguageModeling(tokenizer, whole_word_mask=True, mlm_probability=0.15, seed=3062)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
scheduler = get_scheduler(
    "cosine_with_restarts",
    optimizer=optimizer,
    num_warmup_steps=2,
    num_training_steps=12,
    scheduler_specific_kwargs={"num_cycles": 2},
)
print("vocab", len(tokenizer), "params", sum(p.numel() for p in model.parameters()))
report("built")


def make_batch(texts):
    enc = tokenizer(
        texts,
        truncation=True,
        max_length=320,
        padding=True,
        pad_to_multiple_of=8,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
    )
    features = [{k: enc[k][i] for k in enc} for i in range(len(texts))]
    batch = collator(features)
    return {k: v.to(device) for k, v in batch.items()}


model.train()
B = 24
for step in range(12):
    batch = make_batch(train_texts[step * B : (step + 1) * B])
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            labels=batch["labels"],
        )
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print("step", step, "shape", tuple(batch["input_ids"].shape), "lr", f"{scheduler.get_last_lr()[0]:.2e}")
report("mlm train")

model.eval()
losses = []
with torch.no_grad():
    for i in range(4):
        batch = make_batch(eval_texts[i * B : (i + 1) * B])
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
            )
        losses.append(out.loss.float())
print("eval loss", torch.stack(losses).mean().item())
report("masked eval")

model.half()
embs = []
with torch.no_grad():
    for i in range(4):
        enc = tokenizer(
            eval_texts[i * B : (i + 1) * B],
            truncation=True,
            max_length=320,
            padding=True,
            return_tensors="pt",
        )
        hidden = model.transformer(
            input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device)
        ).last_hidden_state
        embs.append(hidden[:, 0].float())
    e = torch.nn.functional.normalize(torch.cat(embs), dim=-1)
    sim = e @ e.T
    sim.fill_diagonal_(-1)
    top = sim.topk(5, dim=-1)
print("neighbours", top.indices.shape)
report("cls embeddings")
