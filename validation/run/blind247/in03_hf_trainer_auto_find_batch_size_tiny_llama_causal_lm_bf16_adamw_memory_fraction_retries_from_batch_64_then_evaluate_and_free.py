"""transformers' `Trainer` with `auto_find_batch_size=True`: a small Llama causal LM built from its config
(4 layers, hidden 768, 12 heads, 4 key-value heads, intermediate 2048, vocab 32000, SDPA attention) on
random token sequences of 512, `per_device_train_batch_size=64`, bf16 mixed precision, AdamW (torch),
`max_steps=3`, no saving or logging, under `torch.cuda.set_per_process_memory_fraction(0.04)` (6.0 GB).
The Trainer wraps its inner loop in accelerate's `find_executable_batch_size`: each out-of-memory runs
`gc.collect()` and `empty_cache()` in the `except` block and retries at `int(0.9 * batch)`; each retry
starts with `accelerator.free_memory()` and `release_memory` of the wrapped model. Then
`trainer.evaluate()` (eval batch 16), then the trainer and its optimizer deleted, `gc.collect()` and
`empty_cache()`.

The answer is the batch the Trainer settled on (`trainer._train_batch_size`) and the memory figures. No
value-dependent sizes. 4 phases."""

import gc

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

torch.manual_seed(2473)
V, T = 32000, 512


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(0, V, (n, T), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.cuda.set_per_process_memory_fraction(0.04)
cfg = LlamaConfig(
    vocab_size=V,
    hidden_size=768,
    intermediate_size=2048,
    num_hidden_layers=4,
    num_attention_heads=12,
    num_key_value_heads=4,
    max_position_embeddings=T,
)
model = LlamaForCausalLM(cfg)
args = TrainingArguments(
    output_dir="/tmp/in03_trainer",
    per_device_train_batch_size=64,
    per_device_eval_batch_size=16,
    auto_find_batch_size=True,
    max_steps=3,
    bf16=True,
    learning_rate=1e-4,
    optim="adamw_torch",
    save_strategy="no",
    logging_strategy="no",
    eval_strategy="no",
    report_to=[],
    dataloader_num_workers=0,
    seed=2473,
    disable_tqdm=True,
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(512), eval_dataset=Tokens(64))
report("setup")

trainer.train()
print("trainer settled on batch", trainer._train_batch_size)
report("train_auto_find_batch_size")

metrics = trainer.evaluate()
print("eval keys", sorted(metrics))
report("evaluate")

del trainer, model
gc.collect()
torch.cuda.empty_cache()
report("deleted")
