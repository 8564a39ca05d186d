"""A dual-encoder retrieval job (BERT-base from `BertConfig`, mean-pooled embeddings) that plans its own
memory from the caching allocator's state rather than from fixed batch sizes:

1. set-up: the encoder in fp16 for indexing, and a 1.5 GiB "headroom ballast" taken straight from the
   caching allocator on a side stream (`torch.cuda.caching_allocator_alloc(size, stream=side)`), the way
   serving code reserves room for another library before sizing its own batches;
2. indexing 2,048 passages of 384 tokens under inference_mode: before each chunk the script reads
   `torch.cuda.memory_snapshot()`, finds the largest inactive block in the default stream's segments and
   sizes the chunk from a 5 GiB budget: (budget - memory_reserved() + that block) / (384 x 3,072 x 2 x 4
   bytes per passage), at least 32 and at most 256 passages; the passage embeddings (fp16) are kept;
3. the query pass on the side stream made current with `torch.cuda.set_stream(side)` (not a context
   manager): 1,024 queries of 64 tokens in chunks of 256, the ballast handed back with
   `torch.cuda.caching_allocator_delete` half-way, scores against the index with top-10, then the default
   stream restored with `torch.cuda.set_stream(torch.cuda.default_stream())` after a `wait_stream`;
4. the index freed; a contrastive fine-tune of a fresh fp32 copy of the encoder (in-batch negatives,
   temperature 0.05, bf16 autocast, fused AdamW) for 4 steps of 48 query/passage pairs (64 / 256 tokens);
   after each step `memory_snapshot()` counts the segments whose blocks are all inactive, and
   `empty_cache()` runs when there are more than 4;
5. evaluation of the fine-tuned encoder on 512 passages in chunks of 128 under no_grad and bf16 autocast.
5 phases. The only values that decide sizes are memory figures (the snapshot). Seeded."""

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertModel

torch.manual_seed(3104)
dev = torch.device("cuda")


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()} peak_reserved {torch.cuda.max_memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


cfg = BertConfig(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
cfg._attn_implementation = "sdpa"
base = BertModel(cfg, add_pooling_layer=False).eval()
encoder = BertModel(cfg, add_pooling_layer=False).eval()
encoder.load_state_dict(base.state_dict())
encoder = encoder.to(dev, torch.float16)
side = torch.cuda.Stream()
ballast = torch.cuda.caching_allocator_alloc(1536 * 1024 * 1024, stream=side)
report("set-up with ballast")


def embed(model, ids, mask):
    h = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(h.dtype)
    return F.normalize((h * m).sum(1) / m.sum(1), dim=-1)


def largest_free_default_stream():
    default = torch.cuda.default_stream().cuda_stream
    best = 0
    for seg in torch.cuda.memory_snapshot():
        if seg["stream"] != default:
            continue
        for blk in seg["blocks"]:
            if blk["state"] == "inactive":
                best = max(best, blk["size"])
    return best


PER_PASSAGE, BUDGET = 384 * 3072 * 2 * 4, 5 * 1024**3
index, done = [], 0
with torch.inference_mode():
    while done < 2048:
        headroom = BUDGET - torch.cuda.memory_reserved() + largest_free_default_stream()
        chunk = max(32, min(256, headroom // PER_PASSAGE))
        chunk = min(chunk, 2048 - done)
        ids = torch.randint(1000, cfg.vocab_size, (chunk, 384), device=dev)
        mask = torch.ones(chunk, 384, dtype=torch.long, device=dev)
        mask[:, 300:] = (torch.arange(chunk, device=dev) % 2 == 0).long().unsqueeze(1)
        index.append(embed(encoder, ids, mask))
        print(f"indexed chunk {chunk} at {done}")
        done += chunk
        del ids, mask
    index = torch.cat(index)
report("snapshot-sized indexing")

torch.cuda.set_stream(side)
side.wait_stream(torch.cuda.default_stream())
hits = []
with torch.inference_mode():
    for i in range(4):
        if i == 2:
            torch.cuda.caching_allocator_delete(ballast)
        ids = torch.randint(1000, cfg.vocab_size, (256, 64), device=dev)
        mask = torch.ones(256, 64, dtype=torch.long, device=dev)
        q = embed(encoder, ids, mask)
        hits.append((q @ index.T).topk(10, dim=-1).indices)
        del ids, mask, q
torch.cuda.default_stream().wait_stream(side)
torch.cuda.set_stream(torch.cuda.default_stream())
hits = torch.cat(hits)
print(f"query hits {tuple(hits.shape)}")
report("query pass on the side stream")

del index, hits, encoder
model = base.to(dev).train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=True)


def idle_segments():
    return sum(all(b["state"] == "inactive" for b in seg["blocks"]) for seg in torch.cuda.memory_snapshot())


for step in range(4):
    q_ids = torch.randint(1000, cfg.vocab_size, (48, 64), device=dev)
    p_ids = torch.randint(1000, cfg.vocab_size, (48, 256), device=dev)
    q_mask = torch.ones_like(q_ids)
    p_mask = torch.ones_like(p_ids)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        q = embed(model, q_ids, q_mask)
        p = embed(model, p_ids, p_mask)
        logits = (q @ p.T).float() / 0.05
    loss = F.cross_entropy(logits, torch.arange(48, device=dev))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    idle = idle_segments()
    print(f"contrastive step {step} loss {loss.item():.4f} idle segments {idle}")
    del q_ids, p_ids, q_mask, p_mask, q, p, logits, loss
    if idle > 4:
        torch.cuda.empty_cache()
report("contrastive fine-tune")

model.eval()
with torch.no_grad():
    embs = []
    for _ in range(4):
        ids = torch.randint(1000, cfg.vocab_size, (128, 384), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            embs.append(embed(model, ids, torch.ones_like(ids)).float())
        del ids
    embs = torch.cat(embs)
print(f"eval embeddings {tuple(embs.shape)}")
report("evaluation")
