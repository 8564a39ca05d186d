"""`torch.export` of a Hugging Face model built from its config: a Llama (4 layers of 1,024, 16 heads over 4
KV heads, SwiGLU 2,816, vocab 32,000; bf16, eval, SDPA attention) exported under no_grad with
`input_ids` and `attention_mask` as keyword inputs and `use_cache=False`, the batch and sequence axes dynamic
(`Dim.DYNAMIC`), at batch 4 x 256. The exported module then prefills batch 4 x 256, decodes 24 tokens
greedily without a KV cache (each step runs the whole, one token longer, sequence through the exported
graph), and scores a left-padded batch of 16 x 192 (log-softmax of the logits, the targets' log-probabilities
gathered).

Greedy tokens are argmax picks that feed only the token ids (no sizes depend on them). 4 phases."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2585)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


config = LlamaConfig(
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=4,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    torch_dtype="bfloat16",
)
model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
ids = torch.randint(0, config.vocab_size, (4, 256), device="cuda")
mask = torch.ones_like(ids)
seq = torch.export.Dim.DYNAMIC
with torch.no_grad():
    ep = torch.export.export(
        model,
        (),
        {"input_ids": ids, "attention_mask": mask, "use_cache": False},
        dynamic_shapes={"input_ids": {0: seq, 1: seq}, "attention_mask": {0: seq, 1: seq}, "use_cache": None},
    )
gm = ep.module()
report("from_config_export_dynamic_batch_seq")

with torch.no_grad():
    out = gm(input_ids=ids, attention_mask=mask, use_cache=False)
    next_token = out.logits[:, -1].argmax(-1, keepdim=True)
report("prefill_batch4_seq256")

with torch.no_grad():
    for _ in range(24):
        ids = torch.cat([ids, next_token], dim=1)
        mask = torch.ones_like(ids)
        out = gm(input_ids=ids, attention_mask=mask, use_cache=False)
        next_token = out.logits[:, -1].argmax(-1, keepdim=True)
del out
report("cacheless_greedy_decode_24_tokens")

lengths = [192 - 8 * i for i in range(16)]
ids = torch.randint(0, config.vocab_size, (16, 192), device="cuda")
mask = torch.zeros(16, 192, dtype=torch.long, device="cuda")
for row, n in enumerate(lengths):
    mask[row, 192 - n :] = 1
with torch.no_grad():
    logits = gm(input_ids=ids, attention_mask=mask, use_cache=False).logits
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    scores = logprobs.gather(-1, ids[:, 1:, None]).squeeze(-1) * mask[:, 1:]
    total = scores.sum(1)
del logits, logprobs
report("left_padded_batch16_scoring")
