"""Named-entity tagging through the Hugging Face Trainer, as the token-classification recipe does it but
offline: a WordLevel tokenizer built in the script (tokenizers' `models.WordLevel`, WhitespaceSplit
pre-tokenizer, a `[CLS] $A [SEP]` template) in PreTrainedTokenizerFast; sentences are pre-split word lists
(8 to 120 words, 9 BIO tags drawn by a seeded `random.Random`) tokenized with `is_split_into_words=True`
and their labels aligned through `word_ids()` (-100 on special tokens), inside a torch Dataset.
An ElectraForTokenClassification from config (embedding 256 projected to hidden 768, 10 layers, 12 heads,
fp32 weights); DataCollatorForTokenClassification (pad_to_multiple_of=8, labels padded with -100).
TrainingArguments: bf16=True (autocast), optim="adagrad", neftune_noise_alpha=5 (the Trainer's forward
hook adding uniform noise to the input embeddings while training), max_grad_norm=0.5,
per_device_train_batch_size=32, max_steps=4, eval_strategy="steps" with eval_steps=2 and
eval_on_start=True (three evaluations inside train(), 96 sentences at batch 48), batch_eval_metrics=True
with a compute_metrics that keeps running token-accuracy counts as CUDA tensors (nothing gathered), seed
and data_seed, no saving or logging. A TrainerCallback resets the peak at on_train_begin and at each
on_evaluate. Then Trainer.predict on 128 sentences at batch 64 (prediction gathers the logits on the GPU).
Phases: build + move | evaluation before training | steps 1-2 + eval | steps 3-4 + eval | predict."""

import random
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    DataCollatorForTokenClassification,
    ElectraConfig,
    ElectraForTokenClassification,
    PreTrainedTokenizerFast,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

torch.manual_seed(3362)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


tags = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
rng = random.Random(3362)
letters = "abdeghiklmnoprstuvz"
words = sorted({"".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(9000)})
specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
wl = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(specials + words)}, unk_token="[UNK]"))
wl.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
wl.post_processor = processors.TemplateProcessing(
    single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
)
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=wl,
    pad_token="[PAD]",
    unk_token="[UNK]",
    cls_token="[CLS]",
    sep_token="[SEP]",
    mask_token="[MASK]",
    model_max_length=128,
)


class Tagged(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        r = random.Random(seed)
        self.rows = []
        for _ in range(n):
            k = r.randint(8, 120)
            self.rows.append(
                ([r.choice(words) for _ in range(k)], [r.randrange(len(tags)) for _ in range(k)])
            )

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        toks, labs = self.rows[i]
        enc = tokenizer(toks, is_split_into_words=True, truncation=True, max_length=128)
        enc["labels"] = [-100 if w is None else labs[w] for w in enc.word_ids()]
        return enc


train_ds, eval_ds, test_ds = Tagged(256, 11), Tagged(96, 12), Tagged(128, 13)

config = ElectraConfig(
    vocab_size=len(tokenizer),
    embedding_size=256,
    hidden_size=768,
    num_hidden_layers=10,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=128,
    num_labels=len(tags),
    pad_token_id=tokenizer.pad_token_id,
)
model = ElectraForTokenClassification(config)
collator = DataCollatorForTokenClassification(tokenizer, pad_to_multiple_of=8)

counts = {}


def compute_metrics(pred, compute_result):
    logits, labels = pred.predictions, pred.label_ids
    keep = labels != -100
    hit = ((logits.argmax(-1) == labels) & keep).sum()
    counts["hit"] = counts.get("hit", 0) + hit
    counts["n"] = counts.get("n", 0) + keep.sum()
    if not compute_result:
        return {}
    hit_total, n_total = counts.pop("hit"), counts.pop("n")
    return {"token_acc": (hit_total.float() / n_total.clamp(min=1)).item()}


class Memory(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        report("train_begin")

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        report(f"evaluate@{state.global_step}")


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=32,
    per_device_eval_batch_size=48,
    max_steps=4,
    learning_rate=5e-3,
    optim="adagrad",
    bf16=True,
    neftune_noise_alpha=5.0,
    max_grad_norm=0.5,
    eval_strategy="steps",
    eval_steps=2,
    eval_on_start=True,
    batch_eval_metrics=True,
    torch_compile=False,
    logging_strategy="no",
    save_strategy="no",
    report_to=[],
    seed=3362,
    data_seed=3362,
    dataloader_num_workers=0,
)
trainer = Trainer(
    model=model,
    args=args,
    data_collator=collator,
    train_dataset=train_ds,
    eval_dataset=eval_ds,
    processing_class=tokenizer,
    compute_metrics=compute_metrics,
    callbacks=[Memory()],
)
trainer.train()
args.per_device_eval_batch_size = 64
out = trainer.predict(test_ds)
print("predict", out.predictions.shape, sorted(out.metrics))
report("predict")
