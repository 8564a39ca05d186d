"""ESM-2 650M-like protein language model (transformers EsmForMaskedLM from EsmConfig, random weights).

Config as facebook/esm2_t33_650M_UR50D: 33 layers, hidden 1280, 20 heads, FFN 5120, vocabulary 33, rotary
position embeddings, token dropout (masked tokens zeroed in the embedding and the rest rescaled by the
observed mask ratio), emb_layer_norm_after, SDPA attention.

Data: random protein sequences (the 20 standard amino-acid tokens 4..23) with <cls> and <eos>, lengths
between 300 and 510 residues padded to 512; BERT-style masking (15%: 80% <mask>, 10% random, 10% kept)
done on the host as a data collator would, then moved to the GPU.

Phases:
  1. the first MLM step (bf16 autocast, fused AdamW lr 4e-4, 2 micro-batches of 8 accumulated);
  2. 3 more steps;
  3. embedding extraction under inference_mode and bf16 autocast: output_hidden_states, mean-pooled
     per-sequence embeddings of the last layer and of layer 20 (batch 32), moved to the host;
  4. contact prediction with the eager attention (attentions of every layer, symmetrised, APC,
     logistic regression), batch 4;
  5. fine-tuning a per-residue secondary-structure head (3 classes) on the trunk in fp32 with gradient
     checkpointing and foreach Adam, the LM head frozen, batch 4."""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import EsmConfig, EsmForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2061)
if SMALL:
    LAYERS, HIDDEN, HEADS, FFN, LEN, MICRO = 2, 64, 4, 128, 64, 2
else:
    LAYERS, HIDDEN, HEADS, FFN, LEN, MICRO = 33, 1280, 20, 5120, 512, 8
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
CLS, PAD, EOS, MASK = 0, 1, 2, 32


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


config = EsmConfig(
    vocab_size=33,
    mask_token_id=MASK,
    pad_token_id=PAD,
    hidden_size=HIDDEN,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FFN,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    max_position_embeddings=1026,
    position_embedding_type="rotary",
    token_dropout=True,
    emb_layer_norm_before=False,
    layer_norm_eps=1e-5,
    attn_implementation="sdpa",
)
model = EsmForMaskedLM(config).to(device)
print(f"params {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M")
opt = torch.optim.AdamW(model.parameters(), lr=4e-4, betas=(0.9, 0.98), weight_decay=0.01, fused=amp)

gen = torch.Generator().manual_seed(7)


def protein_batch(n, length=LEN):
    """Random sequences padded to `length`: <cls> residues <eos> <pad>..., and the attention mask."""
    ids = torch.full((n, length), PAD, dtype=torch.long)
    mask = torch.zeros(n, length, dtype=torch.long)
    lens = torch.randint(length * 300 // 512, length - 2, (n,), generator=gen)
    for i, n_res in enumerate(lens.tolist()):
        ids[i, 0] = CLS
        ids[i, 1 : n_res + 1] = torch.randint(4, 24, (n_res,), generator=gen)
        ids[i, n_res + 1] = EOS
        mask[i, : n_res + 2] = 1
    return ids, mask


def mlm_collate(ids, mask):
    labels = ids.clone()
    special = (ids == CLS) | (ids == EOS) | (ids == PAD)
    prob = torch.full(ids.shape, 0.15).masked_fill(special, 0.0)
    chosen = torch.bernoulli(prob, generator=gen).bool()
    labels[~chosen] = -100
    inputs = ids.clone()
    replaced = torch.bernoulli(torch.full(ids.shape, 0.8), generator=gen).bool() & chosen
    inputs[replaced] = MASK
    rand = torch.bernoulli(torch.full(ids.shape, 0.5), generator=gen).bool() & chosen & ~replaced
    inputs[rand] = torch.randint(4, 24, ids.shape, generator=gen)[rand]
    return inputs.to(device), mask.to(device), labels.to(device)


def mlm_step():
    for _ in range(2):
        inputs, mask, labels = mlm_collate(*protein_batch(MICRO))
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            out = model(input_ids=inputs, attention_mask=mask, labels=labels)
        (out.loss / 2).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return out.loss.item()


model.train()
print(f"step 0 mlm loss {mlm_step():.4f}")
report("first step")
for _ in range(3):
    loss = mlm_step()
print(f"step 3 mlm loss {loss:.4f}")
report("mlm training")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    ids, mask = protein_batch(4 * MICRO)
    ids, mask = ids.to(device), mask.to(device)
    out = model.esm(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    m = mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
    denom = m.sum(1)
    last = (out.hidden_states[-1] * m).sum(1) / denom
    mid = (out.hidden_states[min(20, LAYERS)] * m).sum(1) / denom
    embeddings = torch.cat([last, mid], dim=-1).float().cpu()
    del out
print(f"embeddings {tuple(embeddings.shape)} norm {embeddings.norm(dim=-1).mean():.3f}")
report("embedding extraction")

model.set_attn_implementation("eager")
with torch.no_grad():
    ids, mask = protein_batch(4)
    ids, mask = ids.to(device), mask.to(device)
    contacts = model.predict_contacts(ids, mask)
    top = contacts.flatten(1).topk(LEN // 2, dim=-1).values.mean()
print(f"contacts {tuple(contacts.shape)} top-L/2 mean prob {top:.4f}")
del contacts
report("contact prediction")

model.set_attn_implementation("sdpa")
head = nn.Sequential(nn.Linear(HIDDEN, 512), nn.GELU(), nn.Dropout(0.1), nn.Linear(512, 3)).to(device)
for p in model.lm_head.parameters():
    p.requires_grad_(False)
del opt
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
ft_params = [p for p in model.esm.parameters() if p.requires_grad] + list(head.parameters())
ft_opt = torch.optim.Adam(
    [{"params": model.esm.parameters(), "lr": 1e-5}, {"params": head.parameters(), "lr": 1e-3}], foreach=True
)
for step in range(3):
    ids, mask = protein_batch(4)
    ss = torch.randint(0, 3, ids.shape, generator=gen).masked_fill(mask == 0, -100)
    ids, mask, ss = ids.to(device), mask.to(device), ss.to(device)
    hidden = model.esm(input_ids=ids, attention_mask=mask).last_hidden_state
    logits = head(hidden)
    loss = F.cross_entropy(logits.view(-1, 3), ss.view(-1), ignore_index=-100)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ft_params, 1.0)
    ft_opt.step()
    ft_opt.zero_grad(set_to_none=True)
    print(f"ss step {step} loss {loss.item():.4f}")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}")
