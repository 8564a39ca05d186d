"""Supervised fine-tuning with padding-free packing, as TRL's `padding_free` / the HF blog post on
packing do it by hand: a small Qwen2ForCausalLM (896 wide, 8 layers, 14 heads with 2 KV heads,
vocab 151,936, tied embeddings) saved on the host with config dtype bfloat16, then
`from_pretrained(dir, dtype="auto", device_map="cuda")` (bf16 weights straight on the GPU);
`gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})`,
`enable_input_require_grads()`, peft LoRA r=16 alpha=32 with `use_rslora=True`, lora_dropout=0.05,
target_modules="all-linear". The Trainer (bf16=True, optim="adamw_torch_fused", per_device batch 8,
train_sampling_strategy="sequential", max_steps=3, no saving or logging) feeds
`DataCollatorWithFlattening()`: each batch's 8 examples (lengths 64-767 drawn on the host with a
seeded generator) concatenated into one row with position_ids restarting at 0, which sdpa turns into
a packed block-causal mask. Then `merge_and_unload()` and greedy `generate` of 4 prompts of 128 ids
with `cache_implementation="static"` and `disable_compile=True` (no torch.compile), 64 new tokens
(min_new_tokens = max_new_tokens, so the length never depends on values), `output_scores=True`,
`return_dict_in_generate=True`, and `compute_transition_scores(normalize_logits=True)`. 5 phases."""

import tempfile

import torch
from peft import LoraConfig, get_peft_model
from transformers import (
    AutoModelForCausalLM,
    DataCollatorWithFlattening,
    Qwen2Config,
    Qwen2ForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

torch.manual_seed(2392)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=8,
                     num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                     tie_word_embeddings=True, eos_token_id=151643, pad_token_id=151643, dtype="bfloat16")
saved = tempfile.mkdtemp()
Qwen2ForCausalLM(config).save_pretrained(saved)

model = AutoModelForCausalLM.from_pretrained(saved, dtype="auto", device_map="cuda", attn_implementation="sdpa")
print(model.dtype)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.enable_input_require_grads()
lora = LoraConfig(r=16, lora_alpha=32, use_rslora=True, lora_dropout=0.05, target_modules="all-linear",
                  task_type="CAUSAL_LM")
model = get_peft_model(model, lora)
model.print_trainable_parameters()
report("load_and_lora")

g = torch.Generator().manual_seed(2392)
lengths = torch.randint(64, 768, (48,), generator=g).tolist()
train_data = [{"input_ids": torch.randint(0, 151643, (n,), generator=g).tolist()} for n in lengths]
print("packed rows", [sum(lengths[i:i + 8]) for i in range(0, 24, 8)])


class Memory(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        report(f"step{state.global_step}")


args = TrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=8,
    max_steps=3,
    learning_rate=2e-4,
    bf16=True,
    optim="adamw_torch_fused",
    train_sampling_strategy="sequential",
    logging_strategy="no",
    save_strategy="no",
    report_to=[],
    remove_unused_columns=False,
    dataloader_num_workers=0,
)
trainer = Trainer(model=model, args=args, train_dataset=train_data, data_collator=DataCollatorWithFlattening(),
                  callbacks=[Memory()])
trainer.train()

merged = model.merge_and_unload()
merged.eval()
merged.config.use_cache = True
prompts = torch.randint(0, 151643, (4, 128), generator=g).cuda()
with torch.inference_mode():
    out = merged.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=64, min_new_tokens=64,
                          do_sample=False, cache_implementation="static", disable_compile=True,
                          output_scores=True, return_dict_in_generate=True)
    scores = merged.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
print(out.sequences.shape, scores.shape)
report("generate_static")
