"""Five-way text classification with a Trainer subclass, as people write it for imbalanced labels: a
WordLevel tokenizer built in the script (tokenizers' `models.WordLevel` over 6,000 made-up words,
Whitespace pre-tokenizer, `$A </s>` template) in PreTrainedTokenizerFast, texts of 16 to 420 words
(truncated at 512 tokens) in a torch Dataset; a Qwen3ForSequenceClassification from config (d 1024, 12
layers, 16 heads with 8 KV heads, head_dim 64, MLP 3,072, sdpa, fp32 weights; the pooled logit is the one
at the last non-pad token); DataCollatorWithPadding(pad_to_multiple_of=16). `WeightedTrainer.compute_loss`
is overridden: class-weighted `F.cross_entropy` with the weights on the model's device, summed and divided
by `num_items_in_batch` under accumulation. TrainingArguments: bf16=True (autocast), optim="sgd" with
optim_args="momentum=0.9,nesterov=True", gradient_checkpointing=True with gradient_checkpointing_kwargs
{"every_n_layers": 2, "offload": True} (every other decoder layer checkpointed, its saved inputs held in
pinned host memory through `save_on_cpu`), per_device_train_batch_size=8, gradient_accumulation_steps=4,
max_steps=3, bf16_full_eval=True (the Trainer places the model itself at train time, then casts it to
bf16 in place at the first evaluate after training), seed/data_seed, no saving or logging. A
TrainerCallback resets the peak at on_train_begin and at on_step_end of steps 1 and 3. Then
trainer.evaluate (96 texts at batch 32, the model cast to bf16 while the SGD momentum buffers stay fp32)
and trainer.predict (160 texts at batch 32, eval_accumulation_steps=2: logits moved to the host every two
batches). Phases: train begin | step 1 | steps 2-3 | evaluate (bf16 cast) | predict."""

import random
import tempfile

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    DataCollatorWithPadding,
    PreTrainedTokenizerFast,
    Qwen3Config,
    Qwen3ForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

torch.manual_seed(3365)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(3365)
words = [f"{rng.choice('bdfgklmnprstz')}{rng.choice('aeiou')}{rng.choice('lmnrs')}{n}" for n in range(6000)]
specials = ["<unk>", "<pad>", "</s>"]
wl = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(specials + words)}, unk_token="<unk>"))
wl.pre_tokenizer = pre_tokenizers.Whitespace()
wl.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=wl, eos_token="</s>", pad_token="<pad>", unk_token="<unk>", model_max_length=512
)

PRIOR = [0.5, 0.2, 0.15, 0.1, 0.05]


class Reviews(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        r = random.Random(seed)
        self.rows = [
            (" ".join(r.choice(words) for _ in range(r.randint(16, 420))), r.choices(range(5), PRIOR)[0])
            for _ in range(n)
        ]

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        text, label = self.rows[i]
        enc = tokenizer(text, truncation=True, max_length=512)
        enc["labels"] = label
        return enc


train_ds, eval_ds, test_ds = Reviews(192, 31), Reviews(96, 32), Reviews(160, 33)

config = Qwen3Config(
    vocab_size=len(tokenizer),
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=64,
    max_position_embeddings=1024,
    num_labels=5,
    pad_token_id=tokenizer.pad_token_id,
    eos_token_id=tokenizer.eos_token_id,
)
config._attn_implementation = "sdpa"
model = Qwen3ForSequenceClassification(config)


class WeightedTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        weight = torch.tensor([1.0 / p for p in PRIOR], device=outputs.logits.device) / 10.0
        loss = F.cross_entropy(outputs.logits.float(), labels, weight=weight, reduction="sum")
        loss = loss / (num_items_in_batch if num_items_in_batch is not None else labels.numel())
        return (loss, outputs) if return_outputs else loss


class Memory(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        report("train_begin")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in (1, 3):
            report(f"step{state.global_step}")


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=8,
    per_device_eval_batch_size=32,
    gradient_accumulation_steps=4,
    max_steps=3,
    learning_rate=1e-3,
    optim="sgd",
    optim_args="momentum=0.9,nesterov=True",
    bf16=True,
    bf16_full_eval=True,
    gradient_checkpointing=True,
    gradient_checkpointing_kwargs={"every_n_layers": 2, "offload": True},
    torch_compile=False,
    logging_strategy="no",
    save_strategy="no",
    eval_strategy="no",
    report_to=[],
    seed=3365,
    data_seed=3365,
    dataloader_num_workers=0,
)
trainer = WeightedTrainer(
    model=model,
    args=args,
    data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=16),
    train_dataset=train_ds,
    eval_dataset=eval_ds,
    processing_class=tokenizer,
    callbacks=[Memory()],
)
trainer.train()
print("evaluate", sorted(trainer.evaluate()))
report("evaluate_bf16")
args.eval_accumulation_steps = 2
out = trainer.predict(test_ds)
print("predict", out.predictions.shape)
report("predict")
