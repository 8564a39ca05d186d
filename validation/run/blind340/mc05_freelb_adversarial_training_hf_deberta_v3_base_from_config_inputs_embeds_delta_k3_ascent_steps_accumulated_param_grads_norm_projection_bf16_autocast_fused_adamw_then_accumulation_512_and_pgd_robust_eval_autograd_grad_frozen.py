"""FreeLB adversarial training (Zhu et al., 2020) of a DeBERTa-v3-base sequence classifier, following the
paper's released training loop for Hugging Face models: transformers' DebertaV2ForSequenceClassification
from a DebertaV2Config of deberta-v3-base's size (vocabulary 128,100, 12 layers at 768, relative attention
with 256 position buckets, c2p + p2c, three labels), random init. Each batch: the word embeddings of the
input ids (`model.get_input_embeddings()`), a perturbation `delta` drawn uniformly on the real tokens and
scaled by adv_init_mag / sqrt(length x 768), then K = 3 ascent steps: the model runs on
`inputs_embeds=embeds + delta` under bf16 autocast, loss / K is backpropagated (parameter gradients add up
over the K steps, `delta.grad` is read), delta takes a normalised gradient step and is projected back to
the adv_max_norm ball, and the embeddings are looked up again for the next step; one optimizer step per
batch. Right-padded batches with lengths drawn on the host, attention_mask from the lengths. AdamW (fused)
without weight decay on biases and LayerNorms, linear warmup schedule, clip_grad_norm_.

Phases: 0 model, optimizer, scheduler; 1 three FreeLB steps (K = 3) at 32 x 256; 2 two FreeLB steps
(K = 2) with gradient accumulation over two micro-batches of 16 x 512; 3 evaluation at 128 x 256 under
no_grad + bf16 autocast; 4 a PGD robustness evaluation: the model in eval mode with `requires_grad_(False)`,
5 projected sign-gradient steps on an embedding perturbation at 64 x 256, each gradient taken with
`torch.autograd.grad(loss, delta)`, then the robust accuracy."""

import os

import torch
from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, get_linear_schedule_with_warmup

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3405)
gen = torch.Generator().manual_seed(3405)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
if SMALL:
    LAYERS, VOCAB, B, L, B2, L2, EVAL_B, PGD_B = 2, 2000, 4, 32, 2, 64, 8, 4
else:
    LAYERS, VOCAB, B, L, B2, L2, EVAL_B, PGD_B = 12, 128100, 32, 256, 16, 512, 128, 64
ADV_K, ADV_LR, ADV_INIT_MAG, ADV_MAX_NORM = 3, 3e-2, 1e-1, 0.0
PGD_STEPS, PGD_EPS, PGD_ALPHA = 5, 1e-2, 3e-3


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


cfg = DebertaV2Config(
    vocab_size=VOCAB,
    hidden_size=768,
    num_hidden_layers=LAYERS,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
    relative_attention=True,
    position_buckets=256,
    norm_rel_ebd="layer_norm",
    share_att_key=True,
    pos_att_type=["p2c", "c2p"],
    position_biased_input=False,
    type_vocab_size=0,
    num_labels=3,
)
model = DebertaV2ForSequenceClassification(cfg).to(device)
no_decay = ["bias", "LayerNorm.weight"]
groups = [
    {
        "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
        "weight_decay": 0.01,
    },
    {
        "params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
        "weight_decay": 0.0,
    },
]
opt = torch.optim.AdamW(groups, lr=2e-5, fused=amp)
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=10, num_training_steps=1000)
print("params", sum(p.numel() for p in model.parameters()))
report("deberta-v3-base classifier fused adamw")


def batch(n, length):
    lengths = torch.randint(length // 4, length + 1, (n,), generator=gen)
    ids = torch.randint(1, VOCAB, (n, length), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    ids = ids.masked_fill(~mask, 0)
    labels = torch.randint(0, 3, (n,), generator=gen)
    return ids.to(device), mask.long().to(device), labels.to(device)


def freelb(ids, mask, labels, k, scale):
    embeds_init = model.get_input_embeddings()(ids)
    input_mask = mask.to(embeds_init)
    input_lengths = input_mask.sum(1)
    delta = torch.zeros_like(embeds_init).uniform_(-1, 1) * input_mask.unsqueeze(2)
    mag = ADV_INIT_MAG / torch.sqrt(input_lengths * embeds_init.size(-1))
    delta = (delta * mag.view(-1, 1, 1)).detach()
    total = 0.0
    for astep in range(k):
        delta.requires_grad_()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            out = model(inputs_embeds=delta + embeds_init, attention_mask=mask, labels=labels)
        loss = out.loss / k * scale
        total += loss.item()
        loss.backward()
        if astep == k - 1:
            break
        delta_grad = delta.grad.clone().detach()
        denorm = torch.norm(delta_grad.view(delta_grad.size(0), -1), dim=1).view(-1, 1, 1)
        denorm = torch.clamp(denorm, min=1e-8)
        delta = (delta + ADV_LR * delta_grad / denorm).detach()
        if ADV_MAX_NORM > 0:
            delta_norm = torch.norm(delta.view(delta.size(0), -1).float(), p=2, dim=1).detach()
            exceed = (delta_norm > ADV_MAX_NORM).to(embeds_init)
            reweights = (ADV_MAX_NORM / delta_norm * exceed + (1 - exceed)).view(-1, 1, 1)
            delta = (delta * reweights).detach()
        embeds_init = model.get_input_embeddings()(ids)
    return total


model.train()
for step in range(3):
    ids, mask, labels = batch(B, L)
    loss = freelb(ids, mask, labels, ADV_K, 1.0)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    model.zero_grad(set_to_none=True)
    print(f"freelb step {step} loss {loss:.4f}")
report("freelb k3 32x256 bf16 autocast")

for step in range(2):
    loss = 0.0
    for _micro in range(2):
        ids, mask, labels = batch(B2, L2)
        loss += freelb(ids, mask, labels, 2, 0.5)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    model.zero_grad(set_to_none=True)
    print(f"freelb accumulated step {step} loss {loss:.4f}")
report("freelb k2 accumulation 2x16x512")

model.eval()
ids, mask, labels = batch(EVAL_B, L)
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    logits = model(input_ids=ids, attention_mask=mask).logits
acc = (logits.argmax(-1) == labels).float().mean()
print(f"clean accuracy {acc.item():.3f}")
del logits
report("evaluation 128x256 no_grad")

model.requires_grad_(False)
ids, mask, labels = batch(PGD_B, L)
with torch.no_grad():
    embeds = model.get_input_embeddings()(ids)
delta = torch.zeros_like(embeds)
for _ in range(PGD_STEPS):
    delta.requires_grad_()
    with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
        out = model(inputs_embeds=embeds + delta, attention_mask=mask, labels=labels)
    (grad,) = torch.autograd.grad(out.loss, delta)
    delta = (delta + PGD_ALPHA * grad.sign()).clamp(-PGD_EPS, PGD_EPS).detach()
with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
    logits = model(inputs_embeds=embeds + delta, attention_mask=mask).logits
robust = (logits.argmax(-1) == labels).float().mean()
print(f"robust accuracy {robust.item():.3f}")
report("pgd robustness evaluation autograd.grad wrt delta")
