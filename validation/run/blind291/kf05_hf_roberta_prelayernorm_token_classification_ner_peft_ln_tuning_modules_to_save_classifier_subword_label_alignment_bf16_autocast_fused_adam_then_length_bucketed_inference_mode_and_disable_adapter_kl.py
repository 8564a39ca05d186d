"""Named-entity tagging with HF RoBERTa-PreLayerNorm (model_type "roberta-prelayernorm"):
RobertaPreLayerNormForTokenClassification from a roberta-large-sized config (1024 wide, 24 layers,
16 heads, 9 BIO labels) adapted with peft LN-tuning (LNTuningConfig: a trainable copy of every
LayerNorm, the base frozen) with the classifier in modules_to_save; batches of 32 sentences padded to
256 sub-word tokens whose labels keep only each word's first sub-token (-100 on continuations and
padding), bf16 autocast, fused Adam, 3 steps. Then tagging under inference_mode in length buckets
(64, 128 and 512 tokens) with masked token accuracy, and a KL divergence between the adapted tagger
and the base model (peft's disable_adapter context) on one batch.

Phases: 0 model wrapped; 1 first step; 2 two more steps; 3 bucketed inference; 4 adapter on/off KL."""

import os

import torch
import torch.nn.functional as F
from peft import LNTuningConfig, get_peft_model
from transformers import RobertaPreLayerNormConfig, RobertaPreLayerNormForTokenClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2915)
if SMALL:
    config = RobertaPreLayerNormConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64
    )
    B, S, BUCKETS = 2, 16, [(4, 8), (2, 16), (1, 24)]
else:
    config = RobertaPreLayerNormConfig(
        vocab_size=50265,
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=16,
        intermediate_size=4096,
        max_position_embeddings=514,
    )
    B, S, BUCKETS = 32, 256, [(96, 64), (48, 128), (8, 512)]
config.num_labels = 9
config.pad_token_id = 1
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def sentences(n, length):
    """Token ids, attention mask and word-aligned BIO labels for n sentences of up to `length` tokens."""
    ids = torch.full((n, length), config.pad_token_id)
    attn = torch.zeros(n, length, dtype=torch.long)
    labels = torch.full((n, length), -100)
    for i in range(n):
        used = int(torch.randint(length // 3, length + 1, ()).item())
        ids[i, :used] = torch.randint(3, config.vocab_size, (used,))
        ids[i, 0], ids[i, used - 1] = 0, 2
        attn[i, :used] = 1
        pos = 1
        while pos < used - 1:
            word = int(torch.randint(1, 4, ()).item())
            labels[i, pos] = int(torch.randint(0, config.num_labels, ()).item())
            pos += word
    return ids, attn, labels


base = RobertaPreLayerNormForTokenClassification(config).to(device)
model = get_peft_model(
    base, LNTuningConfig(target_modules=["LayerNorm"], modules_to_save=["classifier"], task_type="TOKEN_CLS")
)
model.print_trainable_parameters()
optimizer = torch.optim.Adam(
    [p for p in model.parameters() if p.requires_grad], lr=1e-3, fused=device == "cuda"
)
report("built")

model.train()
for step in range(3):
    ids, attn, labels = sentences(B, S)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids.to(device), attention_mask=attn.to(device), labels=labels.to(device))
    out.loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {out.loss.item():.4f}")
    del out, ids, attn, labels
    if step == 0:
        report("step0")
report("steps1-2")

model.eval()
correct = total = 0
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    for n, length in BUCKETS:
        ids, attn, labels = sentences(n, length)
        labels = labels.to(device)
        pred = model(input_ids=ids.to(device), attention_mask=attn.to(device)).logits.argmax(-1)
        keep = labels != -100
        correct += int((pred[keep] == labels[keep]).sum())
        total += int(keep.sum())
print(f"token accuracy {correct / max(total, 1):.3f} over {total}")
report("buckets")

ids, attn, _ = sentences(B, S)
ids, attn = ids.to(device), attn.to(device)
with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
    tuned = model(input_ids=ids, attention_mask=attn).logits.float().log_softmax(-1)
    with model.disable_adapter():
        plain = model(input_ids=ids, attention_mask=attn).logits.float().log_softmax(-1)
    kl = F.kl_div(plain, tuned, log_target=True, reduction="none").sum(-1)
    kl = (kl * attn).sum() / attn.sum()
print(f"adapter KL {kl.item():.4f}")
report("kl")
