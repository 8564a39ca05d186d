"""A Kaggle NLP-competition ensemble (3-class sentiment): three Hugging Face architectures built from
configs (BertForSequenceClassification, ElectraForSequenceClassification, RobertaForSequenceClassification;
4-6 layers, 512 wide), each fine-tuned on the same hold-out split with bf16 autocast, foreach AdamW with a
linear warmup schedule and gradient accumulation of 3, then moved off the GPU with `model.to("cpu")`
(kept alive, its optimizer deleted) while its hold-out logits stay on the GPU; the three models' OOF
logits are stacked on the GPU and a level-2 multinomial logistic stacker (9 -> 3, L2 penalty) is fitted
with torch.optim.LBFGS (strong Wolfe, fixed 20 iterations); finally each model is brought back as
`.half()` one at a time to score the test set under inference_mode, and the stacker blends them.

Phases: 0 data; 1 BERT; 2 ELECTRA; 3 RoBERTa; 4 LBFGS stacker and test blend."""

import os

import torch
import torch.nn.functional as F
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    ElectraConfig,
    ElectraForSequenceClassification,
    RobertaConfig,
    RobertaForSequenceClassification,
    get_linear_schedule_with_warmup,
)

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3295)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    W, H, FF, L, V = 32, 4, 64, 2, 300
    N_TRAIN, N_HOLD, N_TEST, SEQ, BS, MICRO = 36, 16, 16, 32, 4, 6
else:
    W, H, FF, L, V = 512, 8, 2048, 6, 30522
    N_TRAIN, N_HOLD, N_TEST, SEQ, BS, MICRO = 600, 256, 384, 256, 16, 6
N_CLASSES, ACCUM = 3, 3
common = dict(
    vocab_size=V,
    hidden_size=W,
    num_attention_heads=H,
    intermediate_size=FF,
    num_labels=N_CLASSES,
    max_position_embeddings=SEQ + 2,
)
SPECS = {
    "bert": (BertForSequenceClassification, BertConfig(**common, num_hidden_layers=L)),
    "electra": (
        ElectraForSequenceClassification,
        ElectraConfig(**common, num_hidden_layers=L, embedding_size=W // 4),
    ),
    "roberta": (
        RobertaForSequenceClassification,
        RobertaConfig(**common, num_hidden_layers=L - 2, pad_token_id=1, bos_token_id=0, eos_token_id=2),
    ),
}


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def fake_tokens(n):
    lens = torch.randint(SEQ // 3, SEQ + 1, (n,))
    mask = (torch.arange(SEQ)[None, :] < lens[:, None]).long()
    ids = torch.randint(5, V, (n, SEQ)) * mask + (1 - mask) * 1
    return ids, mask


tr_ids, tr_mask = fake_tokens(N_TRAIN)
tr_y = torch.randint(0, N_CLASSES, (N_TRAIN,))
ho_ids, ho_mask = fake_tokens(N_HOLD)
ho_y = torch.randint(0, N_CLASSES, (N_HOLD,)).to(device)
te_ids, te_mask = fake_tokens(N_TEST)
report("data")


def logits_of(model, ids, mask, dtype):
    out = []
    for s in range(0, ids.shape[0], 64):
        out.append(
            model(input_ids=ids[s : s + 64].to(device), attention_mask=mask[s : s + 64].to(device)).logits.to(
                dtype
            )
        )
    return torch.cat(out).float()


trained, oof_logits = {}, []
for name, (cls, cfg) in SPECS.items():
    model = cls(cfg).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01, foreach=True)
    sched = get_linear_schedule_with_warmup(optimizer, 1, MICRO // ACCUM)
    model.train()
    for step in range(MICRO):
        sl = slice(step * BS, (step + 1) * BS)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = model(
                input_ids=tr_ids[sl].to(device),
                attention_mask=tr_mask[sl].to(device),
                labels=tr_y[sl].to(device),
            )
        (out.loss / ACCUM).backward()
        if (step + 1) % ACCUM == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
    model.eval()
    with torch.no_grad(), torch.autocast(device_type=device, dtype=torch.bfloat16):
        oof_logits.append(logits_of(model, ho_ids, ho_mask, torch.float32))
    del optimizer, sched
    trained[name] = model.to("cpu")
    report(name)

Z = torch.cat(oof_logits, 1)  # (N_HOLD, 9)
stacker = torch.nn.Linear(Z.shape[1], N_CLASSES).to(device)
lbfgs = torch.optim.LBFGS(
    stacker.parameters(), lr=1.0, max_iter=20, history_size=10, line_search_fn="strong_wolfe"
)


def closure():
    lbfgs.zero_grad()
    loss = F.cross_entropy(stacker(Z), ho_y) + 1e-3 * stacker.weight.pow(2).sum()
    loss.backward()
    return loss


lbfgs.step(closure)
test_logits = []
for name, model in trained.items():
    model = model.to(device).half()
    with torch.inference_mode():
        test_logits.append(logits_of(model, te_ids, te_mask, torch.float16))
    trained[name] = model.to("cpu")
    del model
with torch.no_grad():
    final = stacker(torch.cat(test_logits, 1)).softmax(-1)
print(
    f"stacker loss {closure().item():.4f} "
    f"test classes {torch.bincount(final.argmax(-1), minlength=N_CLASSES).tolist()}"
)
report("stack")
