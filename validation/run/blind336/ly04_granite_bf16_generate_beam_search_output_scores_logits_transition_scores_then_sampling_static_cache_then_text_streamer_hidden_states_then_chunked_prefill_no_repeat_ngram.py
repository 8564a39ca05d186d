"""Four generation strategies through `model.generate()` on one GraniteForCausalLM from config (d 2048,
16 layers, 16 heads with 4 KV heads, SwiGLU 5,632, vocab 32,000, Granite's embedding/residual/attention/
logits multipliers, sdpa), built on the host and moved with `.to("cuda", torch.bfloat16)`; prompts come from a
WordLevel tokenizer built in the script (tokenizers' `models.WordLevel`, 8,000 made-up words, `<s> $A`
template) in PreTrainedTokenizerFast with padding_side="left". Every call fixes its length with
min_new_tokens == max_new_tokens, so no shape depends on the tokens drawn.
1) beam search on 4 left-padded prompts (40 to 160 words): num_beams=4, num_return_sequences=2,
   length_penalty=0.8, early_stopping=True, return_dict_in_generate with output_scores and output_logits
   (per-step fp32 scores of every beam kept), then `compute_transition_scores(sequences, scores,
   beam_indices)`; 32 new tokens.
2) a GenerationConfig object: do_sample, temperature 0.8, top_k 40, top_p 0.92, repetition_penalty 1.15,
   num_return_sequences=3 on 6 prompts, cache_implementation="static" with disable_compile=True (no
   automatic torch.compile of the decoding forward), 48 new tokens.
3) one prompt of 300 words with a TextStreamer (skip_prompt, skip_special_tokens: the words printed as
   they come), greedy, return_dict_in_generate with output_hidden_states=True (every layer's hidden
   states of every step kept), 40 new tokens.
4) two prompts of 1,500 words prefilled in chunks (prefill_chunk_size=256), greedy with
   no_repeat_ngram_size=3, 24 new tokens, the sequences moved to the host and decoded.
Phases: build + move | beam search | sampling with a static cache | streamer | chunked prefill."""

import random

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    GenerationConfig,
    GraniteConfig,
    GraniteForCausalLM,
    PreTrainedTokenizerFast,
    TextStreamer,
)

torch.manual_seed(3364)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


rng = random.Random(3364)
words = [f"{rng.choice('dfghjklmnprstvw')}{rng.choice('aeiouy')}{n:04d}" for n in range(8000)]
specials = ["<unk>", "<s>", "</s>", "<pad>"]
wl = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(specials + words)}, unk_token="<unk>"))
wl.pre_tokenizer = pre_tokenizers.Whitespace()
wl.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
tokenizer = PreTrainedTokenizerFast(
    tokenizer_object=wl, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
)
tokenizer.padding_side = "left"


def prompts(n, lo, hi):
    return [" ".join(rng.choice(words) for _ in range(rng.randint(lo, hi))) for _ in range(n)]


config = GraniteConfig(
    vocab_size=32000,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=16,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
    embedding_multiplier=12.0,
    residual_multiplier=0.22,
    attention_multiplier=0.015625,
    logits_scaling=8.0,
    bos_token_id=tokenizer.bos_token_id,
    eos_token_id=tokenizer.eos_token_id,
    pad_token_id=tokenizer.pad_token_id,
)
config._attn_implementation = "sdpa"
model = GraniteForCausalLM(config).to("cuda", torch.bfloat16).eval()
report("build")

batch = tokenizer(prompts(4, 40, 160), return_tensors="pt", padding=True).to("cuda")
out = model.generate(
    **batch,
    num_beams=4,
    num_return_sequences=2,
    length_penalty=0.8,
    early_stopping=True,
    max_new_tokens=32,
    min_new_tokens=32,
    return_dict_in_generate=True,
    output_scores=True,
    output_logits=True,
)
trans = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices, normalize_logits=False)
print("beam", tuple(out.sequences.shape), len(out.scores), tuple(trans.shape))
del out, trans, batch
report("beam_search")

gen_config = GenerationConfig(
    do_sample=True,
    temperature=0.8,
    top_k=40,
    top_p=0.92,
    repetition_penalty=1.15,
    num_return_sequences=3,
    max_new_tokens=48,
    min_new_tokens=48,
    cache_implementation="static",
    disable_compile=True,
    bos_token_id=tokenizer.bos_token_id,
    eos_token_id=tokenizer.eos_token_id,
    pad_token_id=tokenizer.pad_token_id,
)
batch = tokenizer(prompts(6, 20, 200), return_tensors="pt", padding=True).to("cuda")
seqs = model.generate(**batch, generation_config=gen_config)
print("sample", tuple(seqs.shape))
del seqs, batch
report("sample_static")

streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
batch = tokenizer(prompts(1, 300, 300), return_tensors="pt").to("cuda")
out = model.generate(
    **batch,
    streamer=streamer,
    do_sample=False,
    max_new_tokens=40,
    min_new_tokens=40,
    return_dict_in_generate=True,
    output_hidden_states=True,
)
print("stream", tuple(out.sequences.shape), len(out.hidden_states), len(out.hidden_states[0]))
del out, batch
report("streamer")

batch = tokenizer(prompts(2, 1500, 1500), return_tensors="pt", padding=True).to("cuda")
seqs = model.generate(
    **batch,
    do_sample=False,
    prefill_chunk_size=256,
    no_repeat_ngram_size=3,
    max_new_tokens=24,
    min_new_tokens=24,
)
texts = tokenizer.batch_decode(seqs[:, batch["input_ids"].shape[1] :].cpu(), skip_special_tokens=True)
print("chunked", tuple(seqs.shape), len(texts))
report("chunked_prefill")
