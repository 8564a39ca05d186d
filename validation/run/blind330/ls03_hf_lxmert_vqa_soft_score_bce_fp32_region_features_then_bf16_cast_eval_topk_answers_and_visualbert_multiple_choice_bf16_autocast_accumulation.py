"""Visual question answering and visual commonsense reasoning on region features (Faster R-CNN style
36 boxes x 2048-d features + normalized box coordinates, synthesized), with Hugging Face models built
from configs: LxmertForQuestionAnswering (language 5 / cross-modality 3 / object-relationship 3 layers,
3,129 answers) is fine-tuned in fp32 with the VQA soft-score binary cross-entropy (targets built with
scatter_ from 10 annotator answers) and AdamW; it is then cast to bf16 with `.to(torch.bfloat16)` and
the validation questions' top-5 answers are taken under inference_mode; finally a
VisualBertForMultipleChoice (4 answer choices, each with the image's region embeddings) is trained with
bf16 autocast and gradient accumulation of 2 micro-batches.

Phases: 0 data; 1 LXMERT fp32 soft-score training; 2 LXMERT bf16 eval; 3 VisualBERT multiple choice."""

import os

import torch
import torch.nn.functional as F
from transformers import (
    LxmertConfig,
    LxmertForQuestionAnswering,
    VisualBertConfig,
    VisualBertForMultipleChoice,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3303)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    W, H, FF, V, N_ANS, BS, STEPS, N_VAL, SEQ, BOXES, FEAT = 64, 4, 128, 2000, 50, 4, 2, 8, 12, 6, 64
else:
    W, H, FF, V, N_ANS, BS, STEPS, N_VAL, SEQ, BOXES, FEAT = (
        768,
        12,
        3072,
        30522,
        3129,
        64,
        6,
        512,
        20,
        36,
        2048,
    )
N_CHOICES, MC_BS, MC_STEPS, ACCUM, MC_SEQ = 4, 16, 4, 2, 40


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def questions(n, length):
    lens = torch.randint(length // 2, length + 1, (n,))
    mask = (torch.arange(length)[None, :] < lens[:, None]).long()
    ids = torch.randint(1000, V, (n, length)) * mask
    ids[:, 0] = 101
    return ids, mask


def regions(n):
    feats = torch.randn(n, BOXES, FEAT).relu_()
    xy = torch.rand(n, BOXES, 2) * 0.7
    wh = torch.rand(n, BOXES, 2) * 0.3 + 0.05
    return feats, torch.cat([xy, xy + wh], dim=-1)


tr_ids, tr_mask = questions(BS * STEPS, SEQ)
tr_feats, tr_boxes = regions(BS * STEPS)
tr_answers = torch.randint(0, N_ANS, (BS * STEPS, 10))
va_ids, va_mask = questions(N_VAL, SEQ)
va_feats, va_boxes = regions(N_VAL)
report("data")

lxmert = LxmertForQuestionAnswering(
    LxmertConfig(
        vocab_size=V,
        hidden_size=W,
        num_attention_heads=H,
        intermediate_size=FF,
        num_qa_labels=N_ANS,
        l_layers=5,
        x_layers=3,
        r_layers=3,
        visual_feat_dim=FEAT,
    )
).to(device)
opt = torch.optim.AdamW(lxmert.parameters(), lr=5e-5)
lxmert.train()
for step in range(STEPS):
    sl = slice(step * BS, (step + 1) * BS)
    ans = tr_answers[sl].to(device)
    counts = torch.zeros(BS, N_ANS, device=device).scatter_add_(
        1, ans, torch.ones_like(ans, dtype=torch.float)
    )
    target = (counts * 0.3).clamp_(max=1.0)
    out = lxmert(
        input_ids=tr_ids[sl].to(device),
        attention_mask=tr_mask[sl].to(device),
        visual_feats=tr_feats[sl].to(device),
        visual_pos=tr_boxes[sl].to(device),
    )
    loss = F.binary_cross_entropy_with_logits(out.question_answering_score, target) * N_ANS
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("lxmert loss", round(loss.item(), 3))
del out, loss, opt, counts, target
report("LXMERT fp32 soft-score training")

lxmert.eval().to(torch.bfloat16)
top_answers = []
with torch.inference_mode():
    for i in range(0, N_VAL, 128):
        out = lxmert(
            input_ids=va_ids[i : i + 128].to(device),
            attention_mask=va_mask[i : i + 128].to(device),
            visual_feats=va_feats[i : i + 128].to(device, torch.bfloat16),
            visual_pos=va_boxes[i : i + 128].to(device, torch.bfloat16),
        )
        top_answers.append(out.question_answering_score.float().sigmoid().topk(5, dim=-1).indices)
    top_answers = torch.cat(top_answers)
print("val top-5", tuple(top_answers.shape))
del lxmert, out
report("LXMERT bf16 eval")

vbert = VisualBertForMultipleChoice(
    VisualBertConfig(
        vocab_size=V,
        hidden_size=W,
        num_attention_heads=H,
        intermediate_size=FF,
        num_hidden_layers=6,
        visual_embedding_dim=FEAT,
    )
).to(device)
opt = torch.optim.AdamW(vbert.parameters(), lr=3e-5, weight_decay=0.01)
vbert.train()
for _step in range(MC_STEPS):
    mb = MC_BS // ACCUM
    for _ in range(ACCUM):
        ids, mask = questions(mb * N_CHOICES, MC_SEQ)
        feats, _ = regions(mb)
        vis = feats.to(device)[:, None].repeat(1, N_CHOICES, 1, 1)
        labels = torch.randint(0, N_CHOICES, (mb,), device=device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = vbert(
                input_ids=ids.view(mb, N_CHOICES, MC_SEQ).to(device),
                attention_mask=mask.view(mb, N_CHOICES, MC_SEQ).to(device),
                visual_embeds=vis,
                visual_attention_mask=torch.ones(mb, N_CHOICES, BOXES, device=device, dtype=torch.long),
                visual_token_type_ids=torch.ones(mb, N_CHOICES, BOXES, device=device, dtype=torch.long),
                labels=labels,
            )
        (out.loss / ACCUM).backward()
    torch.nn.utils.clip_grad_norm_(vbert.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
print("visualbert mc", tuple(out.logits.shape), round(out.loss.item(), 3))
report("VisualBERT multiple choice")
