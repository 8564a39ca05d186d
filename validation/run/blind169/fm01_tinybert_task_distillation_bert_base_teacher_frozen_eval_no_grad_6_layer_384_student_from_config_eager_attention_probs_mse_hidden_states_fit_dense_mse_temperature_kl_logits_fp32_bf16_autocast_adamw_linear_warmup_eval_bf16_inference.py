"""Task-specific knowledge distillation as TinyBERT (huawei-noah/Pretrained-Language-Model,
TinyBERT/task_distill.py) writes it, over Hugging Face BERTs built from config (no download): the
teacher a BERT-base BertForSequenceClassification (12 layers, 768 wide, 12 heads, 3 labels) frozen in
eval mode, its forward under torch.no_grad(); the student a 6-layer, 384-wide BERT (12 heads,
intermediate 1,536) built with attn_implementation="eager" so it returns its attention
probabilities, as does the teacher. Losses: the attention MSE between student layer i and teacher
layer 2i+1 (probabilities, the zeros where masked kept as TinyBERT's where(<= -1e2) would not apply
to probabilities), the hidden-state MSE between all 7 student hidden states projected by a
fit_dense Linear(384, 768) and the teacher's every second hidden state, and the prediction-layer
soft cross-entropy of logits at temperature 2 (F.kl_div of log_softmax(s / T) to softmax(t / T),
batchmean, times T^2) plus the hard-label cross-entropy. fp32 weights under bf16 autocast; AdamW
(lr 5e-5, weight decay 0.01 off for biases and LayerNorm) with transformers' linear warmup schedule;
batches of 32 x 128 tokens with right padding (attention mask from fixed lengths). Phases: the models
built, the first step, three more steps, an evaluation of student and teacher accuracy under no_grad
over 4 batches of 64, then the student cast to bf16 for inference_mode prediction over 2 batches of
256; 5 phases."""

import os

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16901)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    T_CFG = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=128)
    S_CFG = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    VOCAB, B, L, STEPS, EVAL_B, EVAL_N, INF_B = 1000, 4, 32, 3, 4, 2, 8
else:
    T_CFG = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    S_CFG = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
    VOCAB, B, L, STEPS, EVAL_B, EVAL_N, INF_B = 30522, 32, 128, 4, 64, 4, 256
TEMP = 2.0
NUM_LABELS = 3

teacher_cfg = BertConfig(vocab_size=VOCAB, num_labels=NUM_LABELS, **T_CFG)
student_cfg = BertConfig(vocab_size=VOCAB, num_labels=NUM_LABELS, **S_CFG)
teacher = BertForSequenceClassification._from_config(teacher_cfg, attn_implementation="eager").to(device)
student = BertForSequenceClassification._from_config(student_cfg, attn_implementation="eager").to(device)
fit_dense = torch.nn.Linear(student_cfg.hidden_size, teacher_cfg.hidden_size).to(device)
teacher.eval()
for p in teacher.parameters():
    p.requires_grad_(False)

no_decay = ("bias", "LayerNorm.weight")
named = list(student.named_parameters()) + [("fit_dense." + n, p) for n, p in fit_dense.named_parameters()]
groups = [
    {"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(groups, lr=5e-5)
scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=2, num_training_steps=STEPS * 10)
gen = torch.Generator().manual_seed(16901)
n_teacher = sum(p.numel() for p in teacher.parameters())
print(f"teacher {n_teacher} student {sum(p.numel() for p in student.parameters())}")
if device == "cuda":
    print(f"models {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    ids = torch.randint(1000 if not SMALL else 10, VOCAB, (n, L), generator=gen)
    lengths = torch.randint(L // 2, L + 1, (n,), generator=gen)
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    ids[:, 0] = 101 if not SMALL else 1
    labels = torch.randint(0, NUM_LABELS, (n,), generator=gen)
    return ids.to(device), mask.to(device), labels.to(device)


def soft_cross_entropy(predicts, targets):
    return (
        F.kl_div(
            F.log_softmax(predicts / TEMP, dim=-1), F.softmax(targets / TEMP, dim=-1), reduction="batchmean"
        )
        * TEMP**2
    )


layers_per = teacher_cfg.num_hidden_layers // student_cfg.num_hidden_layers
student.train()
for step in range(STEPS):
    ids, mask, labels = batch(B)
    with torch.no_grad(), torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        t_out = teacher(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
    with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
        s_out = student(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        att_loss = 0.0
        for i, s_att in enumerate(s_out.attentions):
            t_att = t_out.attentions[i * layers_per + layers_per - 1]
            att_loss = att_loss + F.mse_loss(s_att.float(), t_att.float())
        rep_loss = 0.0
        for i, s_rep in enumerate(s_out.hidden_states):
            t_rep = t_out.hidden_states[i * layers_per]
            rep_loss = rep_loss + F.mse_loss(fit_dense(s_rep).float(), t_rep.float())
        cls_loss = soft_cross_entropy(s_out.logits.float(), t_out.logits.float())
        hard_loss = F.cross_entropy(s_out.logits.float(), labels)
        loss = att_loss + rep_loss + cls_loss + 0.5 * hard_loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(student.parameters(), 1.0)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    print(
        f"step {step} loss {loss.item():.4f} att {att_loss.item():.4f}"
        f" rep {rep_loss.item():.4f} cls {cls_loss.item():.4f}"
    )
    del t_out, s_out, loss, att_loss, rep_loss, cls_loss, hard_loss
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

student.eval()
agree = correct = total = 0
with torch.no_grad():
    for _ in range(EVAL_N):
        ids, mask, labels = batch(EVAL_B)
        with torch.autocast("cuda" if device == "cuda" else "cpu", dtype=torch.bfloat16):
            s_logits = student(input_ids=ids, attention_mask=mask).logits
            t_logits = teacher(input_ids=ids, attention_mask=mask).logits
        s_pred = s_logits.argmax(-1)
        agree += (s_pred == t_logits.argmax(-1)).sum().item()
        correct += (s_pred == labels).sum().item()
        total += labels.numel()
print(f"eval agreement {agree / total:.3f} accuracy {correct / total:.3f}")
del s_logits, t_logits
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del teacher, optimizer, scheduler, groups, named
student = student.to(torch.bfloat16)
preds = []
with torch.inference_mode():
    for _ in range(2):
        ids, mask, _ = batch(INF_B)
        probs = student(input_ids=ids, attention_mask=mask).logits.float().softmax(-1)
        preds.append(probs.argmax(-1))
print(f"predicted {torch.cat(preds).bincount(minlength=NUM_LABELS).tolist()}")
if device == "cuda":
    print(
        f"inference allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
