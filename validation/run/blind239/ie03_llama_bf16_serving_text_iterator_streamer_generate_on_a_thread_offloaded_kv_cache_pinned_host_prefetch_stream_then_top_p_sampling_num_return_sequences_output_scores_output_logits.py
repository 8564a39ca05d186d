"""Serving-style generation with a Llama from config (2,048 wide, 8 layers, 16 heads with 8 KV heads,
vocab 32,000, sdpa) built on the host and moved to the GPU in bfloat16, as chat demos do:
1) `TextIteratorStreamer` over an in-memory word-level tokenizer (the `tokenizers` library, no
   download) with `model.generate` on a `threading.Thread` and the main thread joining the streamed
   text: one prompt of 256 ids, 128 greedy new tokens;
2) a batch of 8 prompts of 1,024 ids with `cache_implementation="offloaded"` (transformers' offloaded
   DynamicCache: each layer's keys and values copied to pinned host memory after use, the next layer's
   prefetched on a side stream), 64 greedy new tokens;
3) the same batch with the default dynamic cache, for comparison;
4) top-p sampling (top_p=0.9, top_k=0, temperature 0.8) of 4 prompts of 512 ids with
   `num_return_sequences=4`, `output_scores=True`, `output_logits=True`, `return_dict_in_generate=True`,
   48 new tokens.
Every call sets min_new_tokens = max_new_tokens, so EOS is suppressed and no length depends on values.
4 phases."""

import threading

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TextIteratorStreamer

torch.manual_seed(2393)


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


V = 32000
words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0"))
words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", bos_token="w1", eos_token="w2",
                                    pad_token="w0")

config = LlamaConfig(vocab_size=V, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                     num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=4096,
                     bos_token_id=1, eos_token_id=2, pad_token_id=0)
config._attn_implementation = "sdpa"
model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
g = torch.Generator().manual_seed(2393)

prompt = torch.randint(3, V, (1, 256), generator=g).cuda()
streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
worker = threading.Thread(target=model.generate, kwargs=dict(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                                             streamer=streamer, max_new_tokens=128,
                                                             min_new_tokens=128, do_sample=False))
worker.start()
text = "".join(piece for piece in streamer)
worker.join()
print("streamed words", len(text.split()))
report("streamer_thread")

batch = torch.randint(3, V, (8, 1024), generator=g).cuda()
with torch.inference_mode():
    out = model.generate(batch, attention_mask=torch.ones_like(batch), max_new_tokens=64, min_new_tokens=64,
                         do_sample=False, cache_implementation="offloaded")
print(out.shape)
report("offloaded_cache")

with torch.inference_mode():
    out = model.generate(batch, attention_mask=torch.ones_like(batch), max_new_tokens=64, min_new_tokens=64,
                         do_sample=False)
print(out.shape)
report("dynamic_cache")

prompts = torch.randint(3, V, (4, 512), generator=g).cuda()
with torch.inference_mode():
    res = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=48, min_new_tokens=48,
                         do_sample=True, top_p=0.9, top_k=0, temperature=0.8, num_return_sequences=4,
                         output_scores=True, output_logits=True, return_dict_in_generate=True)
print(res.sequences.shape, len(res.scores), res.scores[0].shape, len(res.logits))
report("sampling_scores_logits")
