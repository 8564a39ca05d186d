"""Sequence-to-sequence fine-tuning with the Seq2SeqTrainer after adding tokens, as translation and
summarisation scripts do: a T5 v1.1-style T5ForConditionalGeneration from config (d_model 512, d_ff
1,024 gated-gelu, 6 + 6 layers, 8 heads, vocab 32,128, untied head) built on the host and moved to the
GPU in fp32, then `resize_token_embeddings(32,228, pad_to_multiple_of=64)` on the GPU (32,256 rows:
transformers' mean-and-covariance initialisation of the added rows of both the input embeddings and
the head, a Cholesky check of the scaled covariance and MultivariateNormal sampling, all in fp32 on
the GPU). Seq2SeqTrainingArguments(bf16=True, optim="adamw_torch_fused", gradient_checkpointing=True
with {"use_reentrant": False}, per_device_train_batch_size=8, gradient_accumulation_steps=2,
max_steps=2, predict_with_generate=True, generation_max_length=48, generation_num_beams=4,
per_device_eval_batch_size=8, eval_accumulation_steps=2, report_to=[], no saving or logging); plain
lists of dicts: inputs of 256 ids, labels of 48 ids (default_data_collator). A callback reports at the
start of training and at each optimizer step's end; then `trainer.predict` over 16 examples with beam
search. The generation config's min_length = 48 suppresses EOS until max_length, so every beam runs
to 48 tokens and no size depends on values. 4 phases."""

import tempfile

import torch
from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, T5Config, T5ForConditionalGeneration, TrainerCallback

torch.manual_seed(2396)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


config = T5Config(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=6, num_decoder_layers=6,
                  num_heads=8, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                  decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
model = T5ForConditionalGeneration(config).cuda()
model.resize_token_embeddings(32228, pad_to_multiple_of=64)
print(model.get_input_embeddings().weight.shape, model.lm_head.weight.shape)
model.generation_config.min_length = 48
report("resize_on_gpu")

g = torch.Generator().manual_seed(2396)


def examples(n):
    return [{"input_ids": torch.randint(2, 32228, (256,), generator=g).tolist(),
             "labels": torch.randint(2, 32228, (48,), generator=g).tolist()} for _ in range(n)]


class Memory(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        report(f"step{state.global_step}")


args = Seq2SeqTrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=8,
    per_device_eval_batch_size=8,
    gradient_accumulation_steps=2,
    max_steps=2,
    learning_rate=3e-4,
    bf16=True,
    optim="adamw_torch_fused",
    gradient_checkpointing=True,
    gradient_checkpointing_kwargs={"use_reentrant": False},
    predict_with_generate=True,
    generation_max_length=48,
    generation_num_beams=4,
    eval_accumulation_steps=2,
    logging_strategy="no",
    save_strategy="no",
    report_to=[],
    dataloader_num_workers=0,
)
trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=examples(64), callbacks=[Memory()])
trainer.train()
pred = trainer.predict(examples(16))
print(pred.predictions.shape, pred.metrics)
report("predict_with_generate")
