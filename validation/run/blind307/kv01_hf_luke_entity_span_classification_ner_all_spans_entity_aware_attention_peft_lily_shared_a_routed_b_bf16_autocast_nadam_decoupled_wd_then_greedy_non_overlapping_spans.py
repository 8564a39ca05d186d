"""Span-based named-entity recognition with HF LUKE (model_type "luke"): LukeForEntitySpanClassification
from a luke-base-sized config (768 wide, 12 layers, entity-aware self-attention, a 100k-entity vocabulary
with 256-wide entity embeddings) where every candidate span up to 8 words is an entity slot holding the
[MASK] entity (id 2) with its word positions (padded with -1), and the classifier reads the span's start
and end word states beside the entity state. The model is adapted with peft Lily (LilyConfig: one
low-rank A shared by every 3 layers of a target, 4 B adapters mixed by a learned router) on the
query/value projections (the entity-aware w2e/e2w/e2e queries included), the span classifier trained
in full (modules_to_save). 3 steps at 24 sentences x 192 tokens x 96 spans under bf16 autocast with
NAdam (decoupled weight decay), padded spans labelled -100. Then NER decoding under inference_mode:
span logits for 64 sentences, softmax scores, and a greedy non-overlapping selection of the best
spans on the host (the CoNLL recipe of the LUKE paper), then one longer batch (8 x 512, 256 spans).

Phases: 0 model wrapped; 1 first step; 2 two more steps; 3 span decoding; 4 long batch."""

import os

import torch
from peft import LilyConfig, get_peft_model
from transformers import LukeConfig, LukeForEntitySpanClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3071)
if SMALL:
    config = LukeConfig(
        vocab_size=300,
        entity_vocab_size=50,
        hidden_size=32,
        entity_emb_size=16,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=64,
    )
    B, S, N, EVAL, LONG = 2, 24, 8, (4, 24, 8), (2, 40, 12)
else:
    config = LukeConfig(
        vocab_size=50267,
        entity_vocab_size=100000,
        hidden_size=768,
        entity_emb_size=256,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=514,
    )
    B, S, N, EVAL, LONG = 24, 192, 96, (64, 192, 96), (8, 512, 256)
config.use_entity_aware_attention = True
config.num_labels = 5  # O, PER, ORG, LOC, MISC
config.pad_token_id = 1
MAX_MENTION = 30
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch(n, length, spans, with_labels=True):
    """Word ids with candidate spans (up to 8 words) as [MASK] entities, as LukeTokenizer's
    task="entity_span_classification" lays them out."""
    ids = torch.full((n, length), config.pad_token_id)
    attn = torch.zeros(n, length, dtype=torch.long)
    ent_ids = torch.zeros(n, spans, dtype=torch.long)
    ent_attn = torch.zeros(n, spans, dtype=torch.long)
    ent_pos = torch.full((n, spans, MAX_MENTION), -1)
    starts = torch.zeros(n, spans, dtype=torch.long)
    ends = torch.zeros(n, spans, dtype=torch.long)
    labels = torch.full((n, spans), -100)
    for i in range(n):
        used = int(torch.randint(length // 2, length + 1, ()).item())
        ids[i, :used] = torch.randint(3, config.vocab_size, (used,))
        ids[i, 0], ids[i, used - 1] = 0, 2
        attn[i, :used] = 1
        k = 0
        while k < spans:
            start = int(torch.randint(1, used - 1, ()).item())
            width = int(torch.randint(1, 9, ()).item())
            end = min(start + width, used - 1) - 1
            ent_ids[i, k], ent_attn[i, k] = 2, 1
            ent_pos[i, k, : end - start + 1] = torch.arange(start, end + 1)
            starts[i, k], ends[i, k] = start, end
            labels[i, k] = int(torch.randint(0, config.num_labels, ()).item())
            k += 1
        pad = int(torch.randint(0, spans // 4 + 1, ()).item())
        if pad:
            ent_ids[i, spans - pad :], ent_attn[i, spans - pad :] = 0, 0
            ent_pos[i, spans - pad :] = -1
            labels[i, spans - pad :] = -100
    out = dict(
        input_ids=ids,
        attention_mask=attn,
        entity_ids=ent_ids,
        entity_attention_mask=ent_attn,
        entity_position_ids=ent_pos,
        entity_start_positions=starts,
        entity_end_positions=ends,
    )
    if with_labels:
        out["labels"] = labels
    return {key: v.to(device) for key, v in out.items()}


base = LukeForEntitySpanClassification(config).to(device)
lily = LilyConfig(
    r=16,
    stride_A=3,
    num_B=4,
    scaling=2.0,
    target_modules=["query", "value", "w2e_query", "e2w_query", "e2e_query"],
    modules_to_save=["classifier"],
)
model = get_peft_model(base, lily)
model.print_trainable_parameters()
optimizer = torch.optim.NAdam(
    [p for p in model.parameters() if p.requires_grad],
    lr=2e-4,
    weight_decay=0.01,
    decoupled_weight_decay=True,
)
report("wrapped")

model.train()
for step in range(3):
    inputs = batch(B, S, N)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(**inputs)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, inputs
    if step == 0:
        report("step0")
report("steps1-2")


def decode(inputs):
    with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        logits = model(**inputs).logits.float()
    scores, labels = logits.softmax(-1).max(-1)
    scores, labels = scores.cpu(), labels.cpu()
    starts, ends = inputs["entity_start_positions"].cpu(), inputs["entity_end_positions"].cpu()
    mask = inputs["entity_attention_mask"].cpu()
    found = 0
    for i in range(scores.shape[0]):
        taken = set()
        order = torch.argsort(scores[i], descending=True).tolist()
        for k in order:
            if not mask[i, k] or labels[i, k] == 0:
                continue
            words = set(range(int(starts[i, k]), int(ends[i, k]) + 1))
            if words & taken:
                continue
            taken |= words
            found += 1
    return found


model.eval()
n, length, spans = EVAL
total = 0
for _chunk in range(2):
    total += decode(batch(n // 2, length, spans, with_labels=False))
print(f"entities found {total}")
report("decode")

total = decode(batch(*LONG, with_labels=False))
print(f"long batch entities {total}")
report("long")
