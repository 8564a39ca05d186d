"""Causal-LM fine-tuning with the Hugging Face Trainer and the TrainingArguments people reach for first:
a LlamaForCausalLM from config (1,024 wide, 8 layers, 16 heads with 4 KV heads, vocab 32,000, sdpa) in
fp32 weights built on the host; TrainingArguments(bf16=True (autocast), optim="adamw_torch_fused",
gradient_checkpointing=True with gradient_checkpointing_kwargs={"use_reentrant": False},
per_device_train_batch_size=4, gradient_accumulation_steps=2, max_steps=2, torch_empty_cache_steps=1,
cosine schedule with one warm-up step, report_to=[], no saving, no logging); the datasets are plain
Python lists of dicts of 512 random token ids (labels = inputs, default_data_collator). A callback
reports the memory when training begins (the model moved to the GPU) and at each optimizer step's end.
Then trainer.evaluate() over 24 examples at per_device_eval_batch_size=8 with eval_accumulation_steps=2,
preprocess_logits_for_metrics taking the argmax on the GPU (int64 ids instead of fp32 logits gathered),
and a token-accuracy compute_metrics. 4 phases. No value-dependent sizes (fixed lengths; the loss is
never NaN on the GPU, and the twin takes it as finite)."""

import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

torch.manual_seed(2391)
S = 512


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


config = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                     num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048)
config._attn_implementation = "sdpa"
model = LlamaForCausalLM(config)

g = torch.Generator().manual_seed(2391)


def examples(n):
    out = []
    for _ in range(n):
        ids = torch.randint(0, config.vocab_size, (S,), generator=g).tolist()
        out.append({"input_ids": ids, "labels": list(ids)})
    return out


train_data, eval_data = examples(32), examples(24)


class Memory(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        report("train_begin")

    def on_step_end(self, args, state, control, **kwargs):
        report(f"step{state.global_step}")


def preprocess_logits_for_metrics(logits, labels):
    return logits.argmax(dim=-1)


def compute_metrics(pred):
    preds, labels = pred.predictions[:, :-1], pred.label_ids[:, 1:]
    return {"token_acc": float((preds == labels).mean())}


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=4,
    per_device_eval_batch_size=8,
    gradient_accumulation_steps=2,
    max_steps=2,
    learning_rate=3e-5,
    lr_scheduler_type="cosine",
    warmup_steps=1,
    bf16=True,
    optim="adamw_torch_fused",
    gradient_checkpointing=True,
    gradient_checkpointing_kwargs={"use_reentrant": False},
    torch_empty_cache_steps=1,
    eval_accumulation_steps=2,
    logging_strategy="no",
    save_strategy="no",
    eval_strategy="no",
    report_to=[],
    dataloader_num_workers=0,
)
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=train_data,
    eval_dataset=eval_data,
    callbacks=[Memory()],
    preprocess_logits_for_metrics=preprocess_logits_for_metrics,
    compute_metrics=compute_metrics,
)
trainer.train()
print(trainer.evaluate())
report("evaluate")
