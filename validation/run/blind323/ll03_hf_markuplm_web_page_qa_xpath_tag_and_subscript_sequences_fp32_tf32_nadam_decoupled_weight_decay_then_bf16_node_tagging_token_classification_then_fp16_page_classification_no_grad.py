"""Web-page understanding with HF MarkupLM (model_type "markuplm"): MarkupLMForQuestionAnswering
from a base-sized config (768 wide, 12 layers, 50-deep xpaths) on WebSRC-style inputs, where every
token carries its DOM node's xpath as two (batch, 512, 50) sequences of tag ids and sibling
subscripts padded with tag_pad_id / subs_pad_id, embedded per depth unit and summed into the token
embeddings; fp32 with TF32 matmuls, NAdam (decoupled weight decay), 3 steps
at 16 x 512. The trained encoder then goes into a MarkupLMForTokenClassification (node roles, 12
labels) cast to bf16 for no_grad tagging of 32 pages, and into a MarkupLMForSequenceClassification
(page genre, 8 labels) cast to fp16 for no_grad classification of 64 pages of 384 tokens.

Phases: 0 QA model built; 1 first step; 2 two more steps; 3 bf16 node tagging; 4 fp16 page
classification."""

import copy
import os

import torch
from transformers import (
    MarkupLMConfig,
    MarkupLMForQuestionAnswering,
    MarkupLMForSequenceClassification,
    MarkupLMForTokenClassification,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3233)
if SMALL:
    config = MarkupLMConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_depth=8)
    B, S, B_TAG, B_CLS, S_CLS = 2, 32, 4, 4, 24
else:
    config = MarkupLMConfig(vocab_size=50267, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                            intermediate_size=3072, max_position_embeddings=514, max_depth=50)
    B, S, B_TAG, B_CLS, S_CLS = 16, 512, 32, 64, 384
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def pages(n, length):
    """Token ids, mask and per-token xpaths (tags, subscripts) for n pages of up to `length` tokens."""
    ids = torch.randint(3, config.vocab_size, (n, length))
    mask = torch.ones(n, length, dtype=torch.long)
    tags = torch.full((n, length, config.max_depth), config.tag_pad_id)
    subs = torch.full((n, length, config.max_depth), config.subs_pad_id)
    for i in range(n):
        used = int(torch.randint(length // 2, length + 1, ()).item())
        ids[i, 0], ids[i, used - 1] = 0, 2
        ids[i, used:] = config.pad_token_id
        mask[i, used:] = 0
        pos = 1
        while pos < used - 1:
            node = int(torch.randint(2, 12, ()).item())
            depth = int(torch.randint(3, min(20, config.max_depth) + 1, ()).item())
            tags[i, pos:pos + node, :depth] = torch.randint(0, 216, (depth,))
            subs[i, pos:pos + node, :depth] = torch.randint(0, 30, (depth,))
            pos += node
    return ids, mask, tags, subs


qa = MarkupLMForQuestionAnswering(config).to(device)
optimizer = torch.optim.NAdam(qa.parameters(), lr=3e-5, weight_decay=0.01, decoupled_weight_decay=True)
report("built")

qa.train()
for step in range(3):
    ids, mask, tags, subs = pages(B, S)
    starts = torch.randint(1, S // 2, (B,))
    ends = starts + torch.randint(0, 16, (B,))
    out = qa(input_ids=ids.to(device), attention_mask=mask.to(device), xpath_tags_seq=tags.to(device),
             xpath_subs_seq=subs.to(device), start_positions=starts.to(device), end_positions=ends.to(device))
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, ids, mask, tags, subs
    if step == 0:
        report("step0")
report("steps1-2")

encoder = qa.markuplm.state_dict()
del qa, optimizer
tag_config = copy.deepcopy(config)
tag_config.num_labels = 12
tagger = MarkupLMForTokenClassification(tag_config)
tagger.markuplm.load_state_dict(encoder, strict=False)
tagger.to(device=device, dtype=torch.bfloat16).eval()
with torch.no_grad():
    ids, mask, tags, subs = pages(B_TAG, S)
    logits = tagger(input_ids=ids.to(device), attention_mask=mask.to(device), xpath_tags_seq=tags.to(device),
                    xpath_subs_seq=subs.to(device)).logits
    roles = logits.argmax(-1).masked_fill(mask.to(device) == 0, -1)
    counts = torch.stack([(roles == r).sum() for r in range(12)])
print(f"node roles {counts.tolist()}")
del tagger, logits, roles
report("tagging")

genre_config = copy.deepcopy(config)
genre_config.num_labels = 8
classifier = MarkupLMForSequenceClassification(genre_config)
classifier.markuplm.load_state_dict(encoder, strict=False)
del encoder
classifier.to(device).half().eval()
with torch.no_grad():
    ids, mask, tags, subs = pages(B_CLS, S_CLS)
    probs = classifier(input_ids=ids.to(device), attention_mask=mask.to(device), xpath_tags_seq=tags.to(device),
                       xpath_subs_seq=subs.to(device)).logits.float().softmax(-1)
print(f"genre histogram {probs.argmax(-1).bincount(minlength=8).tolist()}")
report("classify")
