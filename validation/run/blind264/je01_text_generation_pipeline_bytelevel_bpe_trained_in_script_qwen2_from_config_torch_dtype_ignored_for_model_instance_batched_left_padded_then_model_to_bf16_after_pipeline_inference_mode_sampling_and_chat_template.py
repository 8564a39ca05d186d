"""A text-generation pipeline as most users build one, offline: a byte-level BPE tokenizer trained in the
script (tokenizers' BpeTrainer, 6,000 tokens, over a fixed 3,000-line corpus made by a seeded
`random.Random`) wrapped as a PreTrainedTokenizerFast with left padding, a from-config Qwen2 (12 layers,
d 2,048, 16 heads with 4 KV heads, MLP 5,632, vocabulary padded to 6,144), then
`pipeline("text-generation", model=model, tokenizer=tok, device=0, torch_dtype=torch.bfloat16)`.
The model is an instance, so the pipeline's dtype only reaches `load_model` for a hub name
(transformers/pipelines/__init__.py): the weights go to the GPU in fp32 (`Pipeline.__init__`'s
`self.model.to(self.device)`). 12 prompts of 20 to 200 words, batch_size 4, 64 new tokens,
`return_full_text=False`; then `model.to(torch.bfloat16)` after the pipeline was built (the pipeline
holds the same module) and the prompts again under `torch.inference_mode()` (the pipeline's own context
is no_grad), batch_size 8, sampling top-k 50 with 2 return sequences; then a chat template set in the
script and 6 conversations of two turns, batch_size 3, 48 new tokens. Every request runs to its
max_new_tokens (min_new_tokens = max_new_tokens): no value-dependent sizes. 4 phases."""

import random

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, pipeline

torch.manual_seed(2641)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(7)
syll = ["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "ib", "an", "ust", "pe", "qua", "zo", "ri", "mon"]
corpus = [
    " ".join("".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(8, 40)))
    for _ in range(3000)
]
bpe = Tokenizer(models.BPE(unk_token="<unk>"))
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
bpe.train_from_iterator(
    corpus,
    trainers.BpeTrainer(
        vocab_size=6000,
        special_tokens=["<unk>", "<pad>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    ),
)
tok = PreTrainedTokenizerFast(
    tokenizer_object=bpe,
    unk_token="<unk>",
    pad_token="<pad>",
    eos_token="<|im_end|>",
    bos_token="<|endoftext|>",
)
tok.padding_side = "left"
tok.chat_template = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

cfg = Qwen2Config(
    vocab_size=6144,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
    tie_word_embeddings=False,
    pad_token_id=tok.pad_token_id,
    bos_token_id=tok.bos_token_id,
    eos_token_id=tok.eos_token_id,
)
model = Qwen2ForCausalLM(cfg)
model.eval()

gen = pipeline("text-generation", model=model, tokenizer=tok, device=0, torch_dtype=torch.bfloat16)
print(next(model.parameters()).dtype, gen.device)
report("pipeline_built_fp32")

prompts = [
    " ".join(corpus[100 + i].split() + corpus[200 + i].split() * (i % 4 + 1))[:1200] for i in range(12)
]
outs = gen(
    prompts, batch_size=4, max_new_tokens=64, min_new_tokens=64, do_sample=False, return_full_text=False
)
print(len(outs), [len(tok(p)["input_ids"]) for p in prompts])
report("greedy_batch4_fp32")

model.to(torch.bfloat16)
with torch.inference_mode():
    outs = gen(
        prompts,
        batch_size=8,
        max_new_tokens=64,
        min_new_tokens=64,
        do_sample=True,
        top_k=50,
        temperature=0.8,
        num_return_sequences=2,
        return_full_text=False,
    )
print(len(outs), len(outs[0]))
report("bf16_inference_mode_sampling")

chats = [
    [
        {"role": "system", "content": corpus[300 + i]},
        {"role": "user", "content": corpus[400 + i] + " " + corpus[500 + i]},
        {"role": "assistant", "content": corpus[600 + i]},
        {"role": "user", "content": corpus[700 + i]},
    ]
    for i in range(6)
]
outs = gen(chats, batch_size=3, max_new_tokens=48, min_new_tokens=48, do_sample=False)
print(len(outs), outs[0][0]["generated_text"][-1]["role"])
report("chat_template_batch3")
