"""Decoding utilities of HF generate() on GPT-NeoX-Japanese (model_type "gpt_neox_japanese"): a 1.3B-sized
GPTNeoXJapaneseForCausalLM (2,048 wide, 24 layers, 16 heads, vocabulary 32,000) built from its config under
a torch.device("cuda") context (fp32 weights made on the GPU) and cast to float16 in place. Left-padded
prompt batches with attention masks; every call sets min_new_tokens equal to max_new_tokens so no sequence
may stop early. Phase 1: greedy decoding with a user LogitsProcessorList of SequenceBiasLogitsProcessor
(a bias on one- and two-token sequences) and NoBadWordsLogitsProcessor, returning a dict with the per-step
scores. Phase 2: min_p sampling (top_k off, temperature 0.8) with 4 return sequences per prompt and
output_logits. Phase 3: beam search (4 beams, length_penalty 0.8) with output_scores and
compute_transition_scores. Phase 4: greedy decoding without the KV cache (use_cache=False).

Phases: 0 model built; 1 greedy with processors; 2 min_p sampling; 3 beam search + transition scores;
4 no-cache greedy."""

import torch
from transformers import (
    GPTNeoXJapaneseConfig,
    GPTNeoXJapaneseForCausalLM,
    LogitsProcessorList,
    NoBadWordsLogitsProcessor,
    SequenceBiasLogitsProcessor,
)

torch.manual_seed(3143)
device = "cuda"
config = GPTNeoXJapaneseConfig(
    vocab_size=32000,
    hidden_size=2048,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_multiple_size=4,
    max_position_embeddings=2048,
    pad_token_id=0,
)
with torch.device(device):
    model = GPTNeoXJapaneseForCausalLM(config)
model.half().eval()
torch.cuda.reset_peak_memory_stats()


def prompts(n, longest):
    ids = torch.zeros(n, longest, dtype=torch.long)
    mask = torch.zeros(n, longest, dtype=torch.long)
    for i in range(n):
        used = longest - 9 * i % (longest // 2)
        ids[i, longest - used :] = torch.randint(5, 31990, (used,))
        mask[i, longest - used :] = 1
    return ids.to(device), mask.to(device)


ids, mask = prompts(8, 96)
processors = LogitsProcessorList(
    [
        SequenceBiasLogitsProcessor(sequence_bias=[[[17], 4.0], [[123, 456], -8.0], [[31000], -100.0]]),
        NoBadWordsLogitsProcessor(
            bad_words_ids=[[7], [8, 9], [100, 200, 300]], eos_token_id=config.eos_token_id
        ),
    ]
)
out = model.generate(
    input_ids=ids,
    attention_mask=mask,
    max_new_tokens=64,
    min_new_tokens=64,
    do_sample=False,
    logits_processor=processors,
    return_dict_in_generate=True,
    output_scores=True,
)
print(f"greedy {tuple(out.sequences.shape)} scores {len(out.scores)} x {tuple(out.scores[0].shape)}")
del out
torch.cuda.reset_peak_memory_stats()

ids, mask = prompts(4, 128)
out = model.generate(
    input_ids=ids,
    attention_mask=mask,
    max_new_tokens=48,
    min_new_tokens=48,
    do_sample=True,
    top_k=0,
    min_p=0.05,
    temperature=0.8,
    num_return_sequences=4,
    return_dict_in_generate=True,
    output_logits=True,
)
print(f"sampled {tuple(out.sequences.shape)} logits {len(out.logits)}")
del out
torch.cuda.reset_peak_memory_stats()

ids, mask = prompts(4, 64)
out = model.generate(
    input_ids=ids,
    attention_mask=mask,
    max_new_tokens=32,
    min_new_tokens=32,
    num_beams=4,
    length_penalty=0.8,
    return_dict_in_generate=True,
    output_scores=True,
)
scores = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices, normalize_logits=False)
print(
    f"beams {tuple(out.sequences.shape)} transition {tuple(scores.shape)} {scores.float().sum().item():.3f}"
)
del out, scores
torch.cuda.reset_peak_memory_stats()

ids, mask = prompts(4, 48)
seq = model.generate(
    input_ids=ids, attention_mask=mask, max_new_tokens=16, min_new_tokens=16, do_sample=False, use_cache=False
)
print(f"no-cache {tuple(seq.shape)}")
torch.cuda.reset_peak_memory_stats()
