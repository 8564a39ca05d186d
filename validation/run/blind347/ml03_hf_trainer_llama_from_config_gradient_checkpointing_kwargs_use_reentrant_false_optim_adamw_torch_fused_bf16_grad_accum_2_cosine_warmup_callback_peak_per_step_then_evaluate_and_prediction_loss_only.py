"""An HF `Trainer` run as the causal-LM fine-tuning recipes configure it: a LlamaForCausalLM built from a
LlamaConfig (12 layers, 1024 wide, 16 heads with 8 KV heads, SwiGLU 2816, vocabulary 32,000, SDPA), fp32
weights with `bf16=True` (autocast), `gradient_checkpointing=True` with `gradient_checkpointing_kwargs=
{"use_reentrant": False}`, `optim="adamw_torch_fused"`, `per_device_train_batch_size=8` at 1024 tokens,
`gradient_accumulation_steps=2`, cosine schedule with one warmup step, `max_grad_norm=1.0`, `max_steps=3`,
`report_to="none"`, `save_strategy="no"`, the default collator over a map-style dataset of random token rows
(labels = input_ids). A `TrainerCallback` prints `max_memory_allocated()` / `memory_allocated()` /
`max_memory_reserved()` and resets the peak at `on_step_end` (a phase per optimizer step), then
`trainer.evaluate()` on 64 rows at `per_device_eval_batch_size=16` with `prediction_loss_only=True` in the
arguments (no logits gathered).

Phases: 0 model and Trainer construction (the model is moved to the GPU by the Trainer); 1-3 the three
optimizer steps (the first one creates the fused AdamW states); 4 `trainer.evaluate()`."""

import os
import tempfile

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2024)
cuda = torch.cuda.is_available()
if SMALL:
    config = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    B, S, N_TRAIN, N_EVAL, EVAL_B = 2, 32, 16, 8, 4
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=12,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=2048,
    )
    B, S, N_TRAIN, N_EVAL, EVAL_B = 8, 1024, 64, 64, 16
config._attn_implementation = "sdpa"
config.use_cache = False


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, config.vocab_size, (n, S), generator=g)

    def __len__(self):
        return self.ids.shape[0]

    def __getitem__(self, i):
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(S, dtype=torch.long),
            "labels": self.ids[i],
        }


class MemoryCallback(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if cuda:
            print(
                f"step {state.global_step}: max_memory_allocated {torch.cuda.max_memory_allocated()} "
                f"memory_allocated {torch.cuda.memory_allocated()} "
                f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()


model = LlamaForCausalLM(config)
print(f"parameters {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
out_dir = tempfile.mkdtemp()
args = TrainingArguments(
    output_dir=out_dir,
    per_device_train_batch_size=B,
    per_device_eval_batch_size=EVAL_B,
    gradient_accumulation_steps=2,
    gradient_checkpointing=True,
    gradient_checkpointing_kwargs={"use_reentrant": False},
    optim="adamw_torch_fused" if cuda else "adamw_torch",
    learning_rate=3e-4,
    weight_decay=0.1,
    adam_beta2=0.95,
    lr_scheduler_type="cosine",
    warmup_steps=1,
    max_grad_norm=1.0,
    max_steps=3,
    bf16=cuda,
    use_cpu=not cuda,
    logging_steps=1,
    save_strategy="no",
    eval_strategy="no",
    prediction_loss_only=True,
    report_to="none",
    disable_tqdm=True,
    dataloader_num_workers=0,
    seed=2024,
)
trainer = Trainer(
    model=model,
    args=args,
    train_dataset=RandomTokens(N_TRAIN, 1),
    eval_dataset=RandomTokens(N_EVAL, 2),
    callbacks=[MemoryCallback()],
)
if cuda:
    print(
        f"setup: max_memory_allocated {torch.cuda.max_memory_allocated()} "
        f"memory_allocated {torch.cuda.memory_allocated()} "
        f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

result = trainer.train()
print("train loss", round(result.training_loss, 4))
metrics = trainer.evaluate()
print("eval loss", round(metrics["eval_loss"], 4))
if cuda:
    print(
        f"evaluate: max_memory_allocated {torch.cuda.max_memory_allocated()} "
        f"memory_allocated {torch.cuda.memory_allocated()} "
        f"max_memory_reserved {torch.cuda.max_memory_reserved()}"
    )
