"""DistilBERT-style distillation (Sanh et al. 2019) of a BERT-base masked language model into a 6-layer
student, written the way huggingface/transformers' examples/research_projects/distillation/distiller.py
does it, on random token batches.

Teacher: transformers BertForMaskedLM from BertConfig (12 layers, hidden 768, 12 heads, vocabulary
30,522, random init, nothing downloaded), cast to bfloat16 with .bfloat16(), eval mode, run under
torch.no_grad with output_hidden_states. Student: BertForMaskedLM with 6 layers, initialized from the
teacher's embeddings, layers 0, 2, 4, 7, 9, 11 and MLM head (state_dict copy, as DistilBERT's
extract_distilbert.py), fp32 weights under bf16 autocast. Batch 32 sequences padded to 256 tokens with
lengths drawn on the host (attention mask), 15% of real tokens masked for MLM (80/10/10 replacement).
Loss: 5.0 * T^2 * KL over the logits of non-pad positions picked with torch.masked_select (T = 2),
2.0 * MLM cross-entropy, 1.0 * cosine embedding loss between last hidden states of non-pad positions.
Fused AdamW lr 5e-4 with linear warmup, clip_grad_norm_ 5.0.

Phases: the first step; 3 more steps; a no_grad validation MLM loss and top-1 agreement with the teacher
on 4 batches of 64; then a transformers DistilBertForMaskedLM from DistilBertConfig (6 layers, sinusoidal
positions) with gradient checkpointing, trained 2 steps with 2 micro-batches of 32 accumulated, foreach
AdamW. 4 phases."""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM, DistilBertConfig, DistilBertForMaskedLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(19702)
if SMALL:
    B, L, STEPS, EVAL_B, EVAL_N, LAYERS, HID, HEADS = 2, 32, 1, 2, 1, 4, 64, 4
else:
    B, L, STEPS, EVAL_B, EVAL_N, LAYERS, HID, HEADS = 32, 256, 3, 64, 4, 12, 768, 12
VOCAB, MASK_ID, PAD_ID, CLS_ID, SEP_ID = 30522, 103, 0, 101, 102
T, A_CE, A_MLM, A_COS = 2.0, 5.0, 2.0, 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

t_cfg = BertConfig(
    vocab_size=VOCAB,
    hidden_size=HID,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=4 * HID,
    max_position_embeddings=512,
)
teacher = BertForMaskedLM(t_cfg).to(device).bfloat16().eval()
s_cfg = BertConfig(**{**t_cfg.to_dict(), "num_hidden_layers": LAYERS // 2})
student = BertForMaskedLM(s_cfg)
keep = [0, 2, 4, 7, 9, 11] if not SMALL else [0, 2]
t_sd = {k: v.float() for k, v in teacher.state_dict().items()}
s_sd = {}
for k in student.state_dict():
    if ".layer." in k:
        pre, rest = k.split(".layer.", 1)
        i, tail = rest.split(".", 1)
        s_sd[k] = t_sd[f"{pre}.layer.{keep[int(i)]}.{tail}"]
    else:
        s_sd[k] = t_sd[k]
student.load_state_dict(s_sd)
student.to(device).train()
print(
    f"teacher params {sum(p.numel() for p in teacher.parameters())} "
    f"student params {sum(p.numel() for p in student.parameters())}"
)

opt = torch.optim.AdamW(
    student.parameters(), lr=5e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.0, fused=amp
)
WARMUP = 4


def make_batch(n):
    lengths = torch.randint(L // 2, L + 1, (n,))
    ids = torch.randint(1000, VOCAB, (n, L))
    pos = torch.arange(L)[None]
    attn = (pos < lengths[:, None]).long()
    ids[:, 0] = CLS_ID
    ids[torch.arange(n), lengths - 1] = SEP_ID
    ids = ids.masked_fill(attn == 0, PAD_ID)
    special = (ids == CLS_ID) | (ids == SEP_ID) | (ids == PAD_ID)
    pred = (torch.rand(n, L) < 0.15) & ~special
    labels = ids.masked_fill(~pred, -100)
    r = torch.rand(n, L)
    inp = ids.clone()
    inp[pred & (r < 0.8)] = MASK_ID
    rnd = pred & (r >= 0.8) & (r < 0.9)
    inp[rnd] = torch.randint(1000, VOCAB, (int(rnd.sum()),))
    return inp.to(device), attn.to(device), labels.to(device)


def distill_loss(s_out, t_out, attn, labels):
    s_logits, t_logits = s_out.logits, t_out.logits
    mask = attn.bool().unsqueeze(-1).expand_as(s_logits)
    s_sel = torch.masked_select(s_logits, mask).view(-1, s_logits.size(-1))
    t_sel = torch.masked_select(t_logits, mask).view(-1, s_logits.size(-1))
    loss_ce = (
        F.kl_div(
            F.log_softmax(s_sel.float() / T, -1), F.softmax(t_sel.float() / T, -1), reduction="batchmean"
        )
        * T**2
    )
    loss_mlm = F.cross_entropy(s_logits.float().view(-1, VOCAB), labels.view(-1), ignore_index=-100)
    s_h, t_h = s_out.hidden_states[-1], t_out.hidden_states[-1]
    hmask = attn.bool().unsqueeze(-1).expand_as(s_h)
    s_hs = torch.masked_select(s_h, hmask).view(-1, HID)
    t_hs = torch.masked_select(t_h, hmask).view(-1, HID)
    target = s_hs.new_ones(s_hs.size(0))
    loss_cos = F.cosine_embedding_loss(s_hs.float(), t_hs.float(), target)
    return A_CE * loss_ce + A_MLM * loss_mlm + A_COS * loss_cos


def step(i):
    for g in opt.param_groups:
        g["lr"] = 5e-4 * min(1.0, (i + 1) / WARMUP)
    inp, attn, labels = make_batch(B)
    with torch.no_grad():
        t_out = teacher(input_ids=inp, attention_mask=attn, output_hidden_states=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        s_out = student(input_ids=inp, attention_mask=attn, output_hidden_states=True)
        loss = distill_loss(s_out, t_out, attn, labels)
    loss.backward()
    nn.utils.clip_grad_norm_(student.parameters(), 5.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


print(f"step 0 loss {step(0):.4f}")
if device == "cuda":
    print(f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for i in range(STEPS):
    loss = step(i + 1)
print(f"step {STEPS} loss {loss:.4f}")
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

student.eval()
tot, agree, n_tok = 0.0, 0, 0
with torch.no_grad():
    for _ in range(EVAL_N):
        inp, attn, labels = make_batch(EVAL_B)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            s_logits = student(input_ids=inp, attention_mask=attn).logits
        t_logits = teacher(input_ids=inp, attention_mask=attn).logits
        tot += F.cross_entropy(s_logits.float().view(-1, VOCAB), labels.view(-1), ignore_index=-100).item()
        sel = labels != -100
        agree += (s_logits.argmax(-1)[sel] == t_logits.argmax(-1)[sel]).sum().item()
        n_tok += int(sel.sum())
print(
    f"eval mlm loss {tot / EVAL_N:.4f} ppl {math.exp(min(tot / EVAL_N, 20)):.1f} "
    f"teacher agreement {agree / max(n_tok, 1):.4f}"
)
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

opt = student = None
d_cfg = DistilBertConfig(
    vocab_size=VOCAB,
    dim=HID,
    n_layers=LAYERS // 2,
    n_heads=HEADS,
    hidden_dim=4 * HID,
    sinusoidal_pos_embds=True,
    max_position_embeddings=512,
)
dstudent = DistilBertForMaskedLM(d_cfg).to(device)
dstudent.gradient_checkpointing_enable()
dstudent.train()
d_opt = torch.optim.AdamW(dstudent.parameters(), lr=5e-4, weight_decay=0.01, foreach=True)
ACCUM = 2
for i in range(2):
    for _ in range(ACCUM):
        inp, attn, labels = make_batch(B)
        with torch.no_grad():
            t_logits = teacher(input_ids=inp, attention_mask=attn).logits
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            s_logits = dstudent(input_ids=inp, attention_mask=attn).logits
        mask = attn.bool().unsqueeze(-1).expand_as(s_logits)
        s_sel = torch.masked_select(s_logits, mask).view(-1, VOCAB)
        t_sel = torch.masked_select(t_logits, mask).view(-1, VOCAB)
        loss = (
            F.kl_div(
                F.log_softmax(s_sel.float() / T, -1), F.softmax(t_sel.float() / T, -1), reduction="batchmean"
            )
            * T**2
        )
        loss = loss + F.cross_entropy(s_logits.float().view(-1, VOCAB), labels.view(-1))
        (loss / ACCUM).backward()
    nn.utils.clip_grad_norm_(dstudent.parameters(), 5.0)
    d_opt.step()
    d_opt.zero_grad(set_to_none=True)
    print(f"distilbert step {i} loss {loss.item():.4f}")
if device == "cuda":
    print(
        f"distilbert allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
