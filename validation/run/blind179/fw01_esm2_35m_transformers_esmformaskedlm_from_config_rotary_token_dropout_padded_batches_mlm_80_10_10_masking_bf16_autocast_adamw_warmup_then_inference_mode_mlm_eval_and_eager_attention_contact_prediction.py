"""ESM-2 after Lin et al. 2023 ("Evolutionary-scale prediction of atomic-level protein structure with a
language model") and facebookresearch/esm's esm2_t12_35M_UR50D, built from a transformers EsmConfig
(no download): 12 layers, hidden 480, 20 heads, intermediate 1920, rotary position embeddings, ESM's
token dropout (the masked-token rescaling in EsmEmbeddings), the 33-token alphabet (cls 0, pad 1, eos
2, mask 32). Masked-token training as ESM does it: 15% of the residue positions chosen by seeded
`torch.rand`, of which 80% become <mask>, 10% a random residue, 10% stay; the labels -100 elsewhere.
Padded batches of 32 proteins of seeded lengths up to 510 residues (plus cls and eos; the attention mask
is not all ones, so SDPA takes the masked path). bf16 autocast, AdamW (lr 4e-4, weight decay 0.01) with
a linear warm-up by LambdaLR, gradient clipping at 1.0; the first step its own phase, then 3 steps; then
a masked-LM evaluation of 4 batches of 48 under inference_mode (fp32); then ESM's unsupervised contact
prediction (`EsmForMaskedLM.predict_contacts`, the logistic regression over the symmetrized, APC-corrected
attention maps of every layer and head) with the eager attention implementation, 8 proteins of 256
residues; 5 phases."""

import os

import torch
from transformers import EsmConfig, EsmForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17901)
if SMALL:
    LAYERS, HIDDEN, HEADS, INTER, B, MAXLEN, STEPS, EVAL_B, EVAL_N, C_B, C_L = (
        2,
        32,
        4,
        64,
        2,
        30,
        2,
        2,
        1,
        2,
        20,
    )
else:
    LAYERS, HIDDEN, HEADS, INTER, B, MAXLEN, STEPS, EVAL_B, EVAL_N, C_B, C_L = (
        12,
        480,
        20,
        1920,
        32,
        510,
        4,
        48,
        4,
        8,
        256,
    )
device = "cuda" if torch.cuda.is_available() else "cpu"
CLS, PAD, EOS, MASK = 0, 1, 2, 32
RESIDUES = (4, 24)  # L A G V S E R T I D P K Q N F Y M H W C X B U Z O: ids 4..28; the 20 standard ones 4..23

config = EsmConfig(
    vocab_size=33,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=INTER,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=1026,
    position_embedding_type="rotary",
    token_dropout=True,
    emb_layer_norm_before=False,
    mask_token_id=MASK,
    pad_token_id=PAD,
)
model = EsmForMaskedLM(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters())} attn {model.config._attn_implementation}")


def proteins(bs, maxlen, fixed=None):
    lengths = torch.full((bs,), fixed) if fixed else torch.randint(maxlen // 2, maxlen + 1, (bs,))
    width = int(lengths.max()) + 2
    ids = torch.full((bs, width), PAD, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        ids[i, 0] = CLS
        ids[i, 1 : n + 1] = torch.randint(*RESIDUES, (n,))
        ids[i, n + 1] = EOS
    return ids.to(device), (ids != PAD).long().to(device)


def mask_tokens(ids):
    labels = ids.clone()
    residue = ids >= RESIDUES[0]
    chosen = (torch.rand(ids.shape, device=ids.device) < 0.15) & residue
    labels[~chosen] = -100
    r = torch.rand(ids.shape, device=ids.device)
    inputs = ids.clone()
    inputs[chosen & (r < 0.8)] = MASK
    swap = chosen & (r >= 0.8) & (r < 0.9)
    inputs[swap] = torch.randint(*RESIDUES, ids.shape, device=ids.device)[swap]
    return inputs, labels


no_decay = ["bias", "LayerNorm.weight", "layer_norm.weight"]
groups = [
    {
        "params": [p for n, p in model.named_parameters() if not any(k in n for k in no_decay)],
        "weight_decay": 0.01,
    },
    {
        "params": [p for n, p in model.named_parameters() if any(k in n for k in no_decay)],
        "weight_decay": 0.0,
    },
]
optimizer = torch.optim.AdamW(groups, lr=4e-4, betas=(0.9, 0.98), eps=1e-8)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 2000))
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.train()
for step in range(STEPS):
    ids, attn = proteins(B, MAXLEN)
    inputs, labels = mask_tokens(ids)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model(input_ids=inputs, attention_mask=attn, labels=labels)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} width {ids.shape[1]} loss {out.loss.item():.4f}")
    if step == 0 and device == "cuda":
        print(f"step 0 peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()
del out, ids, attn, inputs, labels
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
total, count = 0.0, 0
with torch.inference_mode():
    for _ in range(EVAL_N):
        ids, attn = proteins(EVAL_B, MAXLEN)
        inputs, labels = mask_tokens(ids)
        logits = model(input_ids=inputs, attention_mask=attn).logits
        nll = torch.nn.functional.cross_entropy(
            logits.view(-1, logits.size(-1)), labels.view(-1), ignore_index=-100, reduction="sum"
        )
        total += nll.item()
        count += int((labels != -100).sum())
print(f"eval perplexity {torch.exp(torch.tensor(total / count)).item():.3f}")
del logits, nll, ids, attn, inputs, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.set_attn_implementation("eager")
with torch.no_grad():
    ids, attn = proteins(C_B, C_L, fixed=C_L)
    contacts = model.predict_contacts(ids, attn)
    top = contacts.flatten(1).topk(C_L, dim=1).values.mean()
print(f"contacts {tuple(contacts.shape)} top-L mean {top.item():.4f}")
if device == "cuda":
    print(
        f"contacts allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
