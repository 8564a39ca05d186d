"""Packing without padding in Hugging Face Llama: each row of the batch holds several documents back to
back, told apart only by `position_ids` restarting at 0 (what `DataCollatorWithFlattening` makes), no
attention_mask. transformers finds the documents from the position ids (`find_packed_sequence_indices`)
and builds the attention mask per backend. A Llama from config (6 layers, d 1024, 16 heads, 4 KV heads,
MLP 2816, vocab 32000) in bf16, AdamW (foreach).
Phase 1: `attn_implementation="flex_attention"`: the document-causal mask becomes a BlockMask
(`create_block_mask` over the packed ids) and attention a compiled flex_attention; 3 steps at 4 rows x
4096 tokens. Phase 2: `model.set_attn_implementation("sdpa")`: the mask becomes a boolean
(4, 1, 4096, 4096) tensor and SDPA runs under `sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION,
EFFICIENT_ATTENTION], set_priority=True)` (the first backend that takes a boolean mask); 2 steps.
Phase 3: evaluation under no_grad with `sdpa_kernel(SDPBackend.MATH)` (the scores materialized) on the
same packing at 2 rows. Document lengths are fixed lists, position ids built on the host. 4 phases."""

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(2615)
T = 4096
DOCS = [
    [1024, 512, 2048, 512],
    [3000, 1096],
    [256] * 8 + [2048],
    [4096],
]


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


def packed_batch(rows):
    pos = torch.stack([torch.cat([torch.arange(n) for n in lens]) for lens in rows])
    ids = torch.randint(0, 32000, pos.shape)
    return ids.cuda(), pos.cuda()


cfg = LlamaConfig(
    hidden_size=1024,
    num_hidden_layers=6,
    num_attention_heads=16,
    num_key_value_heads=4,
    intermediate_size=2816,
    vocab_size=32000,
    max_position_embeddings=T,
    tie_word_embeddings=False,
)
model = LlamaForCausalLM._from_config(cfg, attn_implementation="flex_attention", dtype=torch.bfloat16).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
report("llama_bf16_flex_attention")

model.train()
ids, pos = packed_batch(DOCS)
for _ in range(3):
    out = model(input_ids=ids, position_ids=pos, labels=ids)
    out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out
report("packed_flex_attention_document_block_mask_train")

model.set_attn_implementation("sdpa")
for _ in range(2):
    with sdpa_kernel(
        [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
        set_priority=True,
    ):
        out = model(input_ids=ids, position_ids=pos, labels=ids)
        out.loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out
report("packed_sdpa_bool_mask_priority_list_train")

model.eval()
ids2, pos2 = packed_batch(DOCS[:2])
with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
    logits = model(input_ids=ids2, position_ids=pos2).logits
    print("eval logits", tuple(logits.shape))
    del logits
report("packed_eval_math_backend")
