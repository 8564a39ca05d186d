"""Differentially private fine-tuning of BERT the way the Opacus BERT tutorial sets it up (only the last
layers trainable) with per-sample gradients from torch.func: a BertForSequenceClassification from
BertConfig (bert-base sizes: 12 layers, hidden 768, 12 heads, 30,522 vocabulary, 2 labels; eager
attention; about 109M fp32 parameters) with everything frozen but the last two encoder layers, the
pooler and the classifier (about 14.8M trainable). `vmap(grad(loss))` over
`functional_call(model, {**frozen, **trainable}, ...)` on one (1, 128) input_ids/attention_mask row
per sample (right padding, random lengths, passed as a prepared (1, 1, 1, 128) additive fp32 mask;
dropout on, `randomness="different"`), bf16 autocast inside; per-sample norms, clip to C = 1,
and the clipped sum accumulated into `p.summed_grad` over virtual batches (physical batch 32, logical
batch 256 = 8 physical), then Gaussian noise (sigma 0.6) on the device, divide by 256, AdamW(lr 5e-4,
foreach). The first physical batch its own phase, then the rest of the first logical step and a second
logical step; evaluation of 8 batches of 128 under no_grad with bf16 autocast; then a GPT2LMHeadModel
from GPT2Config (6 layers, n_embd 768, 50,257 vocabulary, tied embeddings frozen, the last two blocks
and ln_f trainable, eager attention) trained the same way in fp32 on full 256-token sequences with
labels and no attention mask (physical batch 8, logical 32), 2 logical steps; 4 phases."""

import os

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(18205)
if SMALL:
    bert_cfg = BertConfig(
        hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128, vocab_size=1000
    )
    gpt_cfg = GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=1000, n_positions=128)
    PHYS, LOGICAL, T, EVAL_B, GPT_PHYS, GPT_LOGICAL, GPT_T = 4, 8, 32, 8, 2, 4, 32
else:
    bert_cfg = BertConfig()
    gpt_cfg = GPT2Config(n_layer=6)
    PHYS, LOGICAL, T, EVAL_B, GPT_PHYS, GPT_LOGICAL, GPT_T = 32, 256, 128, 128, 8, 32, 256
bert_cfg._attn_implementation = "eager"
gpt_cfg._attn_implementation = "eager"
C = 1.0
device = "cuda" if torch.cuda.is_available() else "cpu"


def freeze_all_but(model, prefixes):
    for name, p in model.named_parameters():
        p.requires_grad_(any(name.startswith(pre) for pre in prefixes))
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    frozen = {n: p for n, p in model.named_parameters() if not p.requires_grad}
    return trainable, frozen


class VirtualBatchDP:
    def __init__(self, model, trainable, frozen, optimizer, loss_fn, sigma, logical_batch):
        self.trainable = trainable
        self.frozen = frozen
        self.optimizer = optimizer
        self.sigma = sigma
        self.logical_batch = logical_batch
        self.psg = vmap(grad(loss_fn), in_dims=(None, None, 0, 0, 0), randomness="different")

    def accumulate(self, *batch):
        params = {k: v.detach() for k, v in self.trainable.items()}
        grads = self.psg(params, self.frozen, *batch)
        norms = torch.stack([g.flatten(1).norm(2, dim=1) for g in grads.values()], dim=1).norm(2, dim=1)
        factors = (C / (norms + 1e-6)).clamp(max=1.0)
        for name, p in self.trainable.items():
            clipped = torch.einsum("i,i...->...", factors, grads[name])
            if getattr(p, "summed_grad", None) is None:
                p.summed_grad = clipped
            else:
                p.summed_grad += clipped
        return norms

    def step(self):
        for p in self.trainable.values():
            noise = torch.normal(0.0, self.sigma * C, size=p.shape, device=p.device)
            p.grad = (p.summed_grad + noise) / self.logical_batch
            p.summed_grad = None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


bert = BertForSequenceClassification(bert_cfg).to(device)
bert_train, bert_frozen = freeze_all_but(
    bert,
    [
        f"bert.encoder.layer.{bert_cfg.num_hidden_layers - 2}.",
        f"bert.encoder.layer.{bert_cfg.num_hidden_layers - 1}.",
        "bert.pooler.",
        "classifier.",
    ],
)
print(
    f"params {sum(p.numel() for p in bert.parameters())}"
    f" trainable {sum(p.numel() for p in bert_train.values())}"
)


def bert_loss(params, frozen, ids, mask, label):
    # a prepared 4D additive mask: transformers' 2D-mask path calls padding_mask.all(), which vmap refuses
    ext_mask = (1.0 - mask[None, None, None, :].float()) * torch.finfo(torch.float32).min
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        out = functional_call(
            bert,  # noqa: F821 (deleted after the BERT phases, when this is no longer called)
            {**frozen, **params},
            (),
            {"input_ids": ids[None], "attention_mask": ext_mask},
        )
    return F.cross_entropy(out.logits.float(), label[None])


def text_batch(n, t, vocab):
    ids = torch.randint(999 if SMALL else 1000, vocab, (n, t), device=device)
    lengths = torch.randint(t // 4, t + 1, (n,), device=device)
    mask = (torch.arange(t, device=device)[None, :] < lengths[:, None]).long()
    return ids * mask, mask


bert_opt = torch.optim.AdamW(list(bert_train.values()), lr=5e-4, foreach=True)
bert_dp = VirtualBatchDP(bert, bert_train, bert_frozen, bert_opt, bert_loss, sigma=0.6, logical_batch=LOGICAL)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

bert.train()
n_phys = LOGICAL // PHYS
for logical_step in range(2):
    for micro in range(n_phys):
        ids, mask = text_batch(PHYS, T, bert_cfg.vocab_size)
        labels = torch.randint(0, 2, (PHYS,), device=device)
        norms = bert_dp.accumulate(ids, mask, labels)
        if logical_step == 0 and micro == 0:
            print(f"first physical batch median norm {norms.median().item():.3f}")
            if device == "cuda":
                print(
                    f"physical peak {torch.cuda.max_memory_allocated()}"
                    f" reserved {torch.cuda.memory_reserved()}"
                )
                torch.cuda.reset_peak_memory_stats()
    bert_dp.step()
    print(f"logical step {logical_step} last median norm {norms.median().item():.3f}")
del ids, mask, labels, norms
if device == "cuda":
    print(f"train peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

bert.eval()
correct = 0
with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
    for _ in range(8):
        ids, mask = text_batch(EVAL_B, T, bert_cfg.vocab_size)
        labels = torch.randint(0, 2, (EVAL_B,), device=device)
        correct += (bert(input_ids=ids, attention_mask=mask).logits.argmax(-1) == labels).sum().item()
print(f"eval acc {correct / (8 * EVAL_B):.4f}")
del ids, mask, labels
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

del bert, bert_opt, bert_dp, bert_train, bert_frozen
gpt = GPT2LMHeadModel(gpt_cfg).to(device)
gpt_train, gpt_frozen = freeze_all_but(
    gpt,
    [f"transformer.h.{gpt_cfg.n_layer - 2}.", f"transformer.h.{gpt_cfg.n_layer - 1}.", "transformer.ln_f."],
)


def gpt_loss(params, frozen, ids, mask, labels):
    # full-length packed sequences: no padding mask (the 2D-mask path is not vmap-safe)
    out = functional_call(gpt, {**frozen, **params}, (), {"input_ids": ids[None], "labels": labels[None]})
    return out.loss


gpt_opt = torch.optim.AdamW(list(gpt_train.values()), lr=1e-4)
gpt_dp = VirtualBatchDP(gpt, gpt_train, gpt_frozen, gpt_opt, gpt_loss, sigma=0.8, logical_batch=GPT_LOGICAL)
gpt.train()
for logical_step in range(2):
    for _micro in range(GPT_LOGICAL // GPT_PHYS):
        ids = torch.randint(0, gpt_cfg.vocab_size, (GPT_PHYS, GPT_T), device=device)
        mask = torch.ones_like(ids)
        norms = gpt_dp.accumulate(ids, mask, ids)
    gpt_dp.step()
    print(f"gpt logical step {logical_step} median norm {norms.median().item():.3f}")
if device == "cuda":
    print(
        f"gpt allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
