"""Supervised fine-tuning with sequence packing, the padding-free way: documents of random length are
concatenated into fixed 4096-token rows, position_ids restart at 0 at each document and no attention
mask is passed, so transformers' mask construction detects the packed sequences from position_ids and
builds a block-diagonal causal mask (no cross-document attention); the first label of every document
is -100 so no token is predicted across a boundary.

Model: a Jais2ForCausalLM from Jais2Config (16 layers of 1024, 16 heads, relu2 MLP of 4096 with
biases, vocabulary 32,000, untied head), full fine-tune in pure bf16 with gradient checkpointing and
AdamW(fused=True).
Phases: (1) model build + first packed step; (2) three more packed steps at 2 rows x 4096;
(3) inference_mode evaluation of the same documents packed (one row) and padded (one document per row,
right padding with an attention mask), comparing per-token losses; (4) greedy generation of 48 tokens
after 96-token prompts at batch 16 with the KV cache. 4 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import Jais2Config, Jais2ForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29601)
if SMALL:
    cfg = Jais2Config(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=1024,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    ROW, ROWS, MIN_DOC, MAX_DOC, PROMPT, NEW, GEN_B = 256, 2, 16, 96, 16, 4, 2
else:
    cfg = Jais2Config(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=16,
        num_attention_heads=16,
        max_position_embeddings=8192,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    ROW, ROWS, MIN_DOC, MAX_DOC, PROMPT, NEW, GEN_B = 4096, 2, 64, 1100, 96, 48, 16
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def sample_documents(total):
    """Random-length documents (bos ... eos) until `total` tokens are filled; the last one is cut."""
    docs, used = [], 0
    while used < total:
        n = min(int(torch.randint(MIN_DOC, MAX_DOC, ()).item()), total - used)
        body = torch.randint(3, cfg.vocab_size, (n,))
        body[0] = cfg.bos_token_id
        body[-1] = cfg.eos_token_id
        docs.append(body)
        used += n
    return docs


def pack(rows):
    """Greedy packing: each row is its own list of documents; position_ids restart per document."""
    ids, pos, labels, per_row = [], [], [], []
    for _ in range(rows):
        docs = sample_documents(ROW)
        per_row.append(docs)
        ids.append(torch.cat(docs))
        pos.append(torch.cat([torch.arange(len(d)) for d in docs]))
        lab = torch.cat(docs).clone()
        start = 0
        for d in docs:
            lab[start] = -100  # never predict a document's first token from the previous document
            start += len(d)
        labels.append(lab)
    return (
        torch.stack(ids).to(device),
        torch.stack(pos).to(device),
        torch.stack(labels).to(device),
        per_row,
    )


model = Jais2ForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
model.train()
opt = torch.optim.AdamW(
    model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=device == "cuda"
)

for step in range(4):
    input_ids, position_ids, labels, per_row = pack(ROWS)
    out = model(input_ids=input_ids, position_ids=position_ids, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} docs {sum(len(r) for r in per_row)} loss {out.loss.item():.4f}")
    del out
    if step == 0:
        report("build and first packed step")
report("packed steps")

model.eval()
model.config.use_cache = True
with torch.inference_mode():
    input_ids, position_ids, labels, per_row = pack(1)
    logits = model(input_ids=input_ids, position_ids=position_ids).logits
    packed_nll = F.cross_entropy(logits[0, :-1].float(), labels[0, 1:], ignore_index=-100, reduction="none")
    docs = per_row[0]
    width = max(len(d) for d in docs)
    padded = torch.full((len(docs), width), cfg.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(docs), width), dtype=torch.long)
    for i, d in enumerate(docs):
        padded[i, : len(d)] = d
        mask[i, : len(d)] = 1
    padded, mask = padded.to(device), mask.to(device)
    plogits = model(input_ids=padded, attention_mask=mask).logits
    plabels = padded.masked_fill(mask == 0, -100)
    padded_nll = F.cross_entropy(
        plogits[:, :-1].float().flatten(0, 1), plabels[:, 1:].flatten(), ignore_index=-100, reduction="none"
    )
    kept = labels[0, 1:] != -100
    print(
        f"eval docs {len(docs)} packed nll {packed_nll[kept].mean().item():.4f} "
        f"padded nll {padded_nll[plabels[:, 1:].flatten() != -100].mean().item():.4f}"
    )
    del logits, plogits
report("packed vs padded eval")

with torch.inference_mode():
    prompts = torch.randint(3, cfg.vocab_size, (GEN_B, PROMPT), device=device)
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        do_sample=False,
    )
print(f"generated {tuple(gen.shape)}")
report("greedy generate")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
