"""Sequence-to-sequence fine-tuning through Seq2SeqTrainer, as the summarization recipe does it but offline:
one WordLevel tokenizer built in the script (tokenizers' `models.WordLevel` over 5,000 made-up words,
Whitespace pre-tokenizer, `<s> $A </s>`) in PreTrainedTokenizerFast, sources of 30 to 300 words (truncated
at 256 tokens) and targets of 8 to 60 words tokenized together with `text_target=` in a torch Dataset; a
BartForConditionalGeneration from config (d 768, 6 + 6 layers, 12 heads, fp32, forced BOS/EOS off);
DataCollatorForSeq2Seq(model=model) (labels padded with -100, decoder_input_ids made by the model's
`prepare_decoder_input_ids_from_labels`, pad_to_multiple_of=8). Seq2SeqTrainingArguments: fp32 weights and
math with tf32=True, optim="adamw_torch" (foreach AdamW), gradient_checkpointing=True with the default
kwargs (non-reentrant in this transformers), per_device_train_batch_size=16, gradient_accumulation_steps=2,
max_steps=3, predict_with_generate=True with generation_num_beams=4 and generation_max_length=64, no saving or
logging, seed/data_seed. A TrainerCallback resets the peak at on_train_begin and after steps 1 and 3.
Then trainer.evaluate (48 examples at batch 16: the loss forward, then beam search with
min_new_tokens=max_new_tokens=40 so every beam runs to the end, generated ids padded to 64) and
trainer.predict (64 examples at batch 32, top-k sampling, num_beams=1, 48 new tokens).
Phases: build + move | step 1 | steps 2-3 | evaluate (beam search) | predict (sampling)."""

import random
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)

torch.manual_seed(3363)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(3363)
words = [f"{rng.choice('bcdfgklmnprstvz')}{rng.choice('aeiou')}{n:04d}" for n in range(5000)]
specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
wl = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(specials + words)}, unk_token="<unk>"))
wl.pre_tokenizer = pre_tokenizers.Whitespace()
wl.post_processor = processors.TemplateProcessing(
    single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
)
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=wl,
    bos_token="<s>",
    eos_token="</s>",
    pad_token="<pad>",
    unk_token="<unk>",
    mask_token="<mask>",
    model_max_length=256,
)


class Pairs(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        r = random.Random(seed)
        self.rows = []
        for _ in range(n):
            src = [r.choice(words) for _ in range(r.randint(30, 300))]
            self.rows.append((" ".join(src), " ".join(r.sample(src, r.randint(8, min(60, len(src)))))))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        src, tgt = self.rows[i]
        return tokenizer(src, text_target=tgt, truncation=True, max_length=256)


train_ds, eval_ds, test_ds = Pairs(192, 21), Pairs(48, 22), Pairs(64, 23)

config = BartConfig(
    vocab_size=len(tokenizer),
    d_model=768,
    encoder_layers=6,
    decoder_layers=6,
    encoder_attention_heads=12,
    decoder_attention_heads=12,
    encoder_ffn_dim=3072,
    decoder_ffn_dim=3072,
    max_position_embeddings=256,
    pad_token_id=tokenizer.pad_token_id,
    bos_token_id=tokenizer.bos_token_id,
    eos_token_id=tokenizer.eos_token_id,
    decoder_start_token_id=tokenizer.eos_token_id,
)
model = BartForConditionalGeneration(config)
model.generation_config.forced_bos_token_id = None
model.generation_config.forced_eos_token_id = None
collator = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100, pad_to_multiple_of=8)


class Memory(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        report("train_begin")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in (1, 3):
            report(f"step{state.global_step}")


args = Seq2SeqTrainingArguments(
    output_dir=tempfile.mkdtemp(),
    per_device_train_batch_size=16,
    per_device_eval_batch_size=16,
    gradient_accumulation_steps=2,
    max_steps=3,
    learning_rate=2e-4,
    optim="adamw_torch",
    tf32=True,
    gradient_checkpointing=True,
    predict_with_generate=True,
    generation_num_beams=4,
    generation_max_length=64,
    torch_compile=False,
    logging_strategy="no",
    save_strategy="no",
    eval_strategy="no",
    report_to=[],
    seed=3363,
    data_seed=3363,
    dataloader_num_workers=0,
)
trainer = Seq2SeqTrainer(
    model=model,
    args=args,
    data_collator=collator,
    train_dataset=train_ds,
    eval_dataset=eval_ds,
    processing_class=tokenizer,
    callbacks=[Memory()],
)
trainer.train()
metrics = trainer.evaluate(max_new_tokens=40, min_new_tokens=40)
print("evaluate", sorted(metrics))
report("evaluate_beam")
args.per_device_eval_batch_size = 32
out = trainer.predict(test_ds, num_beams=1, do_sample=True, top_k=50, max_new_tokens=48, min_new_tokens=48)
print("predict", out.predictions.shape)
report("predict_sample")
