"""2:4 semi-structured sparsity the way PyTorch's tutorial does it, on a Hugging Face BERT built from its
config (6 layers, d 768, 12 heads, MLP 3072, vocab 30522, 2 labels): `torch.ao.pruning`'s
`WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)` prepared on
every encoder nn.Linear (FakeSparsity parametrizations holding a mask per weight on the GPU),
`sparsifier.step()`, then fine-tuning with the masks in place (fp32 weights under bf16 autocast, AdamW,
batch 32 x 256, 3 steps, the masks recomputed after each step as the tutorial does); then
`squash_mask()`, the model cast to fp16, dense inference under inference_mode (batch 64 x 256), then
every encoder nn.Linear's weight swapped for `to_sparse_semi_structured(weight)` (cuSPARSELt's
compressed weights: `_cslt_compress`, then `_cslt_sparse_mm` per call) and the same inference, then a
second batch shape (100 x 203 tokens: 20,300 rows, which the subclass pads to a multiple of 8 with
`F.pad` before each sparse matmul).

Mask values come from weight norms on the GPU but never decide a size. 5 phases."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.pruning import WeightNormSparsifier
from torch.sparse import to_sparse_semi_structured
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(2614)
B, T = 32, 256


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = BertConfig(
    hidden_size=768,
    num_hidden_layers=6,
    num_attention_heads=12,
    intermediate_size=3072,
    vocab_size=30522,
    num_labels=2,
    attn_implementation="sdpa",
)
model = BertForSequenceClassification(cfg).cuda()
targets = [fqn for fqn, m in model.named_modules() if isinstance(m, nn.Linear) and "encoder.layer" in fqn]
sparsifier = WeightNormSparsifier(sparsity_level=1.0, sparse_block_shape=(1, 4), zeros_per_block=2)
sparsifier.prepare(model, [{"tensor_fqn": f"{fqn}.weight"} for fqn in targets])
sparsifier.step()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, foreach=True)
report("bert_fp32_sparsifier_prepared_and_first_masks")

model.train()
for _ in range(3):
    ids = torch.randint(0, cfg.vocab_size, (B, T), device="cuda")
    labels = torch.randint(0, 2, (B,), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits.float(), labels)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sparsifier.step()
    del ids, labels, logits, loss
report("finetune_with_fake_sparsity_masks_bf16_autocast")

sparsifier.squash_mask()
del opt
model = model.half().eval()
ids = torch.randint(0, cfg.vocab_size, (64, T), device="cuda")
with torch.inference_mode():
    dense_logits = model(input_ids=ids).logits
report("squash_mask_fp16_dense_inference")

for fqn in targets:
    mod = model.get_submodule(fqn)
    mod.weight = nn.Parameter(to_sparse_semi_structured(mod.weight))
report("to_sparse_semi_structured_weights")

with torch.inference_mode():
    sparse_logits = model(input_ids=ids).logits
    print("sparse and dense logits", tuple(sparse_logits.shape), tuple(dense_logits.shape))
    ids2 = torch.randint(0, cfg.vocab_size, (100, 203), device="cuda")
    logits2 = model(input_ids=ids2).logits
    del logits2, ids2
report("sparse_inference_two_batch_shapes")
