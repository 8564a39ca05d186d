"""Robust Chinese BERT with HF RoCBert (model_type "roc_bert"): RoCBertForPreTraining from a
base-sized config (768 wide, 12 layers, 21,128 words, shape and pronunciation vocabularies concatenated
into the embeddings) trained with its adversarial contrastive objective: masked LM on the clean view
plus, per step, two more encoder passes over an "attack" view (characters swapped for look-alike
shape / pronunciation ids) and the label view, their pooled outputs compared in a batch-wide
similarity matrix; batches of 32 x 128, bf16 autocast, AdamW(foreach=False), 3 steps. The pretrained
encoder then goes into a RoCBertForMultipleChoice (4 choices), fine-tuned 2 optimizer steps of 2
accumulated micro-batches of 12 x 4 x 128 with clip_grad_norm_, and scored under inference_mode with
choice accuracy at 48 questions.

Phases: 0 pretraining model built; 1 first pretraining step; 2 two more steps; 3 multiple-choice
fine-tuning; 4 inference_mode choice scoring."""

import os

import torch
from transformers import RoCBertConfig, RoCBertForMultipleChoice, RoCBertForPreTraining

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3232)
if SMALL:
    config = RoCBertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, shape_vocab_size=100, pronunciation_vocab_size=50,
                           shape_embed_dim=16, pronunciation_embed_dim=8)
    B, S, B_MC, CHOICES, B_EVAL = 4, 16, 2, 4, 4
else:
    config = RoCBertConfig(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           intermediate_size=3072, max_position_embeddings=512)
    B, S, B_MC, CHOICES, B_EVAL = 32, 128, 12, 4, 48
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def view(ids):
    """Shape and pronunciation ids for token ids (a fixed hash of the character)."""
    return ids % config.shape_vocab_size, ids % config.pronunciation_vocab_size


def pretraining_batch():
    clean = torch.randint(104, config.vocab_size, (B, S))
    clean[:, 0], clean[:, -1] = 101, 102
    mask = torch.ones(B, S, dtype=torch.long)
    labels = torch.full((B, S), -100)
    chosen = torch.rand(B, S) < 0.15
    chosen[:, 0] = chosen[:, -1] = False
    labels[chosen] = clean[chosen]
    masked = clean.masked_fill(chosen, 103)
    attack = clean.clone()
    swap = torch.rand(B, S) < 0.1
    swap[:, 0] = swap[:, -1] = False
    attack[swap] = torch.randint(104, config.vocab_size, (int(swap.sum()),))
    shape, pron = view(masked)
    a_shape, a_pron = view(attack)
    l_shape, l_pron = view(clean)
    batch = dict(
        input_ids=masked, input_shape_ids=shape, input_pronunciation_ids=pron, attention_mask=mask,
        attack_input_ids=attack, attack_input_shape_ids=a_shape, attack_input_pronunciation_ids=a_pron,
        attack_attention_mask=mask, labels_input_ids=labels, labels_input_shape_ids=l_shape,
        labels_input_pronunciation_ids=l_pron, labels_attention_mask=mask,
    )
    return {k: v.to(device) for k, v in batch.items()}


def choice_batch(n):
    ids = torch.randint(104, config.vocab_size, (n, CHOICES, S))
    ids[..., 0] = 101
    mask = torch.ones(n, CHOICES, S, dtype=torch.long)
    types = torch.zeros(n, CHOICES, S, dtype=torch.long)
    for i in range(n):
        context = int(torch.randint(S // 3, 2 * S // 3, ()).item())
        answer = int(torch.randint(S // 8, S - context, ()).item())
        types[i, :, context:context + answer] = 1
        mask[i, :, context + answer:] = 0
        ids[i, :, context + answer:] = 0
    shape, pron = view(ids)
    labels = torch.randint(0, CHOICES, (n,))
    return {k: v.to(device) for k, v in dict(
        input_ids=ids, input_shape_ids=shape, input_pronunciation_ids=pron, attention_mask=mask,
        token_type_ids=types, labels=labels).items()}


pre = RoCBertForPreTraining(config).to(device)
optimizer = torch.optim.AdamW(pre.parameters(), lr=1e-4, weight_decay=0.01, foreach=False)
report("built")

pre.train()
for step in range(3):
    batch = pretraining_batch()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = pre(**batch)
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"pretrain step {step} loss {out.loss.item():.4f}")
    del out, batch
    if step == 0:
        report("pretrain0")
report("pretrain1-2")

mc = RoCBertForMultipleChoice(config).to(device)
mc.roc_bert.load_state_dict(pre.roc_bert.state_dict(), strict=False)
del pre, optimizer
mc_opt = torch.optim.AdamW(mc.parameters(), lr=2e-5, foreach=False)
mc.train()
for step in range(2):
    for micro in range(2):
        batch = choice_batch(B_MC)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = mc(**batch)
        (out.loss / 2).backward()
        del out, batch
    torch.nn.utils.clip_grad_norm_(mc.parameters(), 1.0)
    mc_opt.step()
    mc_opt.zero_grad(set_to_none=True)
report("mc-finetune")

mc.eval()
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    batch = choice_batch(B_EVAL)
    labels = batch.pop("labels")
    logits = mc(**batch).logits
    accuracy = (logits.argmax(-1) == labels).float().mean()
print(f"choice accuracy {accuracy.item():.3f}")
report("score")
