"""Masked-LM pre-training through the Hugging Face Trainer, as the run_mlm recipe does it but offline:
a WordLevel tokenizer built in the script (tokenizers' `models.WordLevel` over 4,100 made-up words,
Whitespace pre-tokenizer, a `<s> $A </s>` template) wrapped in PreTrainedTokenizerFast; a torch Dataset of
seeded random sentences (20 to 230 words, truncated at 256 tokens) tokenized in `__getitem__`; a
RobertaForMaskedLM from config (8 layers, d 512, 8 heads, fp32); DataCollatorForLanguageModeling
(mlm_probability 0.15, pad_to_multiple_of=8: dynamic padding per batch). TrainingArguments:
optim="adafactor" (factored second moments, no first moment), label_smoothing_factor=0.1 (the Trainer's
LabelSmoother on the logits instead of the model's loss), per_device_train_batch_size=16,
gradient_accumulation_steps=2, max_steps=4, eval_strategy="steps" with eval_steps=2 (two evaluations
inside train(), 48 examples at batch 24), torch_compile=False, seed/data_seed, no saving or logging.
A TrainerCallback resets the peak at on_train_begin and at each on_evaluate. Then Trainer.predict on
64 examples at batch 32 (logits of every batch gathered on the GPU, padded with -100 across batches).
Phases: build + move | steps 1-2 + eval | steps 3-4 + eval | predict. Shapes depend only on the seeded
sentence lengths and the seeded sampler order, never on values."""

import random
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    DataCollatorForLanguageModeling,
    PreTrainedTokenizerFast,
    RobertaConfig,
    RobertaForMaskedLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

torch.manual_seed(3361)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(3361)
syll = ["ta", "ko", "mi", "ren", "su", "vel", "an", "dor", "pi", "ul", "zen", "ra", "lo", "qui"]
lexicon = sorted({"".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(7000)})[:6000]
specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
vocab = {w: i for i, w in enumerate(specials + lexicon)}
wl = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
wl.pre_tokenizer = pre_tokenizers.Whitespace()
wl.post_processor = processors.TemplateProcessing(
    single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
)
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=wl,
    bos_token="<s>",
    eos_token="</s>",
    cls_token="<s>",
    sep_token="</s>",
    pad_token="<pad>",
    unk_token="<unk>",
    mask_token="<mask>",
    model_max_length=256,
)


class Sentences(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        r = random.Random(seed)
        self.texts = [" ".join(r.choice(lexicon) for _ in range(r.randint(20, 230))) for _ in range(n)]

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        return tokenizer(self.texts[i], truncation=True, max_length=256, return_special_tokens_mask=True)


train_ds, eval_ds, test_ds = Sentences(256, 1), Sentences(48, 2), Sentences(64, 3)

config = RobertaConfig(
    vocab_size=len(tokenizer),
    hidden_size=512,
    num_hidden_layers=8,
    num_attention_heads=8,
    intermediate_size=2048,
    max_position_embeddings=258,
    pad_token_id=tokenizer.pad_token_id,
    bos_token_id=tokenizer.bos_token_id,
    eos_token_id=tokenizer.eos_token_id,
)
model = RobertaForMaskedLM(config)
collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, mlm_probability=0.15, pad_to_multiple_of=8)


class Memory(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        report("train_begin")

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        report(f"evaluate@{state.global_step}")


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=16,
    per_device_eval_batch_size=24,
    gradient_accumulation_steps=2,
    max_steps=4,
    learning_rate=1e-3,
    optim="adafactor",
    label_smoothing_factor=0.1,
    weight_decay=0.01,
    warmup_steps=1,
    eval_strategy="steps",
    eval_steps=2,
    torch_compile=False,
    logging_strategy="no",
    save_strategy="no",
    report_to=[],
    seed=3361,
    data_seed=3361,
    dataloader_num_workers=0,
)
trainer = Trainer(
    model=model,
    args=args,
    data_collator=collator,
    train_dataset=train_ds,
    eval_dataset=eval_ds,
    processing_class=tokenizer,
    callbacks=[Memory()],
)
trainer.train()
args.per_device_eval_batch_size = 32
out = trainer.predict(test_ds)
print("predict", out.predictions.shape, round(float(out.metrics["test_loss"]), 3))
report("predict")
