"""Model soups (Wortsman et al. 2022) with a BERT-base sequence classifier: transformers'
BertForSequenceClassification built from BertConfig (12 layers of 768, 12 heads, vocabulary 30,522,
4 labels; the default sdpa attention), one shared initial state, five fine-tuned ingredients.

Phase 1: each ingredient is a `copy.deepcopy` of the initial model fine-tuned for 4 steps at batch 32 x 256
tokens under bf16 autocast by a fused AdamW with its own learning rate and seed (linear warmup by
LambdaLR), with an attention_mask padding each row to a host-drawn length; its state_dict is cloned and
kept on the GPU, the model and optimizer deleted. Phase 2: the uniform soup (every key's stack mean) and
the greedy soup (ingredients sorted by held-out accuracy, each added when the held-out accuracy of the
running average does not drop; the running average is formed as a fresh dict each time) are evaluated under
no_grad on a held-out batch of 128 x 256. Phase 3: the logit ensemble of all five ingredients (each loaded
into one model in turn with load_state_dict, logits softmaxed and averaged) against the soups. Phase 4:
the ingredients are freed, empty_cache(), the greedy soup cast to fp16 and run under inference_mode at
batch 64 x 512 with padding. 4 phases."""

import copy

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(22502)
device = "cuda"
N_ING, STEPS, B, T, LABELS = 5, 4, 32, 256, 4
LRS = [1e-5, 2e-5, 3e-5, 5e-5, 1e-4]


def report(tag):
    print(f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
          f"reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n, t, gen_seed):
    g = torch.Generator().manual_seed(gen_seed)
    ids = torch.randint(1000, 30522, (n, t), generator=g)
    lengths = torch.randint(t // 2, t + 1, (n,), generator=g)
    mask = (torch.arange(t)[None, :] < lengths[:, None]).long()
    labels = ids[:, 1] % LABELS
    return ids.to(device), mask.to(device), labels.to(device)


config = BertConfig(num_labels=LABELS)
init_model = BertForSequenceClassification(config).to(device)
init_model.train()

ingredients = []
for i, lr in enumerate(LRS):
    torch.manual_seed(100 + i)
    model = copy.deepcopy(init_model)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 2))
    for step in range(STEPS):
        ids, mask, labels = batch(B, T, 1000 * i + step)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=mask, labels=labels)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    print(f"ingredient {i} lr {lr} loss {out.loss.item():.4f}")
    ingredients.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    del model, opt, sched, out
report("fine-tune ingredients")

held_ids, held_mask, held_labels = batch(128, T, 424242)
eval_model = copy.deepcopy(init_model).eval()
del init_model


@torch.no_grad()
def held_out_acc(state):
    eval_model.load_state_dict(state)
    logits = eval_model(input_ids=held_ids, attention_mask=held_mask).logits
    return (logits.argmax(-1) == held_labels).float().mean().item()


uniform = {k: torch.stack([s[k].float() for s in ingredients]).mean(0).to(ingredients[0][k].dtype)
           for k in ingredients[0]}
uniform_acc = held_out_acc(uniform)
accs = [held_out_acc(s) for s in ingredients]
order = sorted(range(N_ING), key=lambda j: -accs[j])
greedy_members = [order[0]]
greedy = {k: v.clone() for k, v in ingredients[order[0]].items()}
best = accs[order[0]]
for j in order[1:]:
    n = len(greedy_members)
    candidate = {k: (greedy[k] * n + ingredients[j][k]) / (n + 1) if greedy[k].is_floating_point()
                 else greedy[k] for k in greedy}
    acc = held_out_acc(candidate)
    if acc >= best:
        greedy, best = candidate, acc
        greedy_members.append(j)
    del candidate
print("ingredient accs", accs, "uniform", uniform_acc, "greedy", best, greedy_members)
report("uniform and greedy soups")

with torch.no_grad():
    probs = torch.zeros(held_ids.shape[0], LABELS, device=device)
    for s in ingredients:
        eval_model.load_state_dict(s)
        probs += eval_model(input_ids=held_ids, attention_mask=held_mask).logits.softmax(-1) / N_ING
    ens_acc = (probs.argmax(-1) == held_labels).float().mean().item()
    ens_nll = F.nll_loss(probs.clamp_min(1e-8).log(), held_labels).item()
print("logit ensemble acc", ens_acc, "nll", ens_nll)
report("logit ensemble")

del ingredients, uniform, probs
torch.cuda.empty_cache()
eval_model.load_state_dict(greedy)
del greedy
eval_model.half()
ids, mask, _ = batch(64, 512, 7)
with torch.inference_mode():
    logits = eval_model(input_ids=ids, attention_mask=mask).logits
print("fp16 greedy soup", tuple(logits.shape), "max allocated", torch.cuda.max_memory_allocated())
report("fp16 soup inference")
