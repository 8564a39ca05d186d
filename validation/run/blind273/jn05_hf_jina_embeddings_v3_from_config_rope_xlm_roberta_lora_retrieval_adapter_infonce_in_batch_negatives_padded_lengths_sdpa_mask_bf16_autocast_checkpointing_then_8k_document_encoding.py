"""A retrieval embedding model from transformers 5.17's `JinaEmbeddingsV3Model` (the jina-embeddings-v3
layout: an XLM-RoBERTa encoder with rotary positions, 24 layers of d 1,024, 16 heads, MLP 4,096, vocabulary
250,002, 8,194 positions) built from config and trained the way sentence-embedding projects do: a peft 0.21
LoRA adapter (r 8, alpha 16; q/k/v/o and both MLP projections -- the "retrieval" task adapter), fp32
weights under bf16 autocast, non-reentrant gradient checkpointing, 6 AdamW steps of an InfoNCE loss
(temperature 0.05) over in-batch negatives: 64 queries of at most 64 tokens and 64 passages of at most 512
tokens, right-padded with seeded per-row lengths (a padding `attention_mask`, so SDPA gets the
bidirectional mask), mean pooling over the mask and L2 normalisation, the loss symmetric (queries to
passages and back); then under `torch.inference_mode()` in bf16 autocast: 16 long documents of up to 8,192
tokens (seeded lengths 2,048 to 8,192) encoded in batches of 4 and a corpus of 1,024 passages of 256
encoded in batches of 128, scores by a matrix product. Sizes come from host-side seeded lengths, none from
CUDA values. 3 phases."""

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from transformers import JinaEmbeddingsV3Config, JinaEmbeddingsV3Model

torch.manual_seed(2735)
gen = torch.Generator().manual_seed(2735)


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = JinaEmbeddingsV3Config(
    vocab_size=250002,
    hidden_size=1024,
    num_hidden_layers=24,
    num_attention_heads=16,
    intermediate_size=4096,
    max_position_embeddings=8194,
)
model = JinaEmbeddingsV3Model(cfg, add_pooling_layer=False).cuda()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
lora = LoraConfig(
    r=8,
    lora_alpha=16,
    lora_dropout=0.1,
    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "fc1", "fc2"],
)
model = get_peft_model(model, lora)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.01)
report("jina_v3_lora_built_fp32")


def padded(n, lo, hi):
    lengths = torch.randint(lo, hi + 1, (n,), generator=gen)
    L = int(lengths.max())
    ids = torch.randint(5, cfg.vocab_size, (n, L), generator=gen)
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    ids = ids.masked_fill(mask == 0, cfg.pad_token_id)
    ids[:, 0] = cfg.bos_token_id
    return ids.cuda(), mask.cuda()


def embed(ids, mask):
    h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(h.dtype)
    return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


model.train()
for step in range(6):
    q_ids, q_mask = padded(64, 8, 64)
    p_ids, p_mask = padded(64, 128, 512)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        q = embed(q_ids, q_mask)
        p = embed(p_ids, p_mask)
    scores = (q.float() @ p.float().T) / 0.05
    target = torch.arange(64, device="cuda")
    loss = (F.cross_entropy(scores, target) + F.cross_entropy(scores.T, target)) / 2
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(step, round(loss.item(), 4))
report("contrastive_lora_training")

del opt, loss, scores
model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    docs = []
    for _ in range(4):
        ids, mask = padded(4, 2048, 8192)
        docs.append(embed(ids, mask))
    docs = torch.cat(docs)
    corpus = []
    for _ in range(8):
        ids = torch.randint(5, cfg.vocab_size, (128, 256), generator=gen).cuda()
        corpus.append(embed(ids, torch.ones_like(ids)))
    corpus = torch.cat(corpus)
    sims = docs @ corpus.T
print("scores", tuple(sims.shape))
report("long_document_and_corpus_encoding")
