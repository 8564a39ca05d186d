"""SWAG (Maddox et al. 2019) and preconditioned SGLD (Li et al. 2016) on a BERT-base text classifier.

A BertForSequenceClassification from BertConfig (12 layers of 768, random init, 4 labels) on random token
ids with right padding (attention_mask). SWAG keeps, over the SGD iterates, the running first and second
moments of the flattened weights (torch.nn.utils.parameters_to_vector) and a low-rank deviation matrix of
the last K = 10 iterates minus the running mean; a SWAG sample is
mean + sqrt(diag var) z1 / sqrt(2) + D^T z2 / sqrt(2 (K - 1)), written into the model by vector_to_parameters.

Phases: 3 steps of fused AdamW under bf16 autocast at 32 x 256 tokens; SWAG collection over 12 SGD steps
at a constant learning rate (bf16 autocast), the moments and the deviation column updated after each step;
SWAG Bayesian model averaging under no_grad: 6 samples, each evaluated at 128 x 256; then the SWAG
state freed, empty_cache(), and pSGLD by hand (RMSprop preconditioner, Langevin noise from randn_like per
parameter, four thinned copies of the classifier head kept) with gradient checkpointing in fp32 at 48 x 256.
4 phases."""

import math
import os

import torch
from torch.nn.utils import parameters_to_vector, vector_to_parameters
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(2184)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, num_labels=4)
else:
    cfg = BertConfig(num_labels=4)
SEQ = 32 if SMALL else 256
B_ADAM, B_SWAG, B_EVAL, B_SGLD = (2, 2, 4, 2) if SMALL else (32, 32, 128, 48)
K, SWAG_STEPS, SAMPLES = 10, 12, (2 if SMALL else 6)
N_DATA = 100000


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak {torch.cuda.max_memory_allocated()} allocated {torch.cuda.memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


def batch(n):
    ids = torch.randint(0, cfg.vocab_size, (n, SEQ), device=device)
    lengths = torch.randint(SEQ // 2, SEQ + 1, (n,), device=device)
    mask = (torch.arange(SEQ, device=device)[None] < lengths[:, None]).long()
    labels = torch.randint(0, cfg.num_labels, (n,), device=device)
    return ids, mask, labels


model = BertForSequenceClassification(cfg).to(device)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, fused=device == "cuda")
for step in range(3):
    ids, mask, labels = batch(B_ADAM)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
print(f"adamw loss {loss.item():.4f}")
report("bert bf16 fused adamw")

# SWAG collection: running moments and low-rank deviations over constant-lr SGD iterates
del opt
params = [p for p in model.parameters()]
n_params = sum(p.numel() for p in params)
swag_mean = torch.zeros(n_params, device=device)
swag_sq = torch.zeros(n_params, device=device)
swag_dev = torch.zeros(K, n_params, device=device)
opt = torch.optim.SGD(params, lr=0.01, momentum=0.9, weight_decay=1e-4)
for n in range(SWAG_STEPS):
    ids, mask, labels = batch(B_SWAG)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        flat = parameters_to_vector(params)
        swag_mean.mul_(n / (n + 1)).add_(flat, alpha=1 / (n + 1))
        swag_sq.mul_(n / (n + 1)).add_(flat.square(), alpha=1 / (n + 1))
        swag_dev[n % K].copy_(flat - swag_mean)
        del flat
print(f"swag sgd loss {loss.item():.4f} params {n_params}")
report("swag collection sgd moments deviations")

# SWAG Bayesian model averaging
del opt
model.eval()
with torch.no_grad():  # not inference_mode: the sampled weights are trained on by pSGLD later
    ids, mask, labels = batch(B_EVAL)
    probs = torch.zeros(B_EVAL, cfg.num_labels, device=device)
    var = (swag_sq - swag_mean.square()).clamp_min(1e-30)
    for s in range(SAMPLES):
        z1 = torch.randn(n_params, device=device)
        z2 = torch.randn(K, device=device)
        sample = swag_mean + var.sqrt() * z1 / math.sqrt(2) + swag_dev.t() @ z2 / math.sqrt(2 * (K - 1))
        vector_to_parameters(sample, params)
        del sample, z1
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            probs += model(input_ids=ids, attention_mask=mask).logits.float().softmax(-1)
    probs /= SAMPLES
    nll = -probs.gather(1, labels[:, None]).clamp_min(1e-12).log().mean()
    print(f"swag bma nll {nll.item():.4f}")
    del var
report("swag sampling bma no_grad")

# pSGLD by hand, gradient checkpointing, fp32
del swag_mean, swag_sq, swag_dev, probs
if device == "cuda":
    torch.cuda.empty_cache()
model.train()
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
LR, ALPHA, LAMBDA = 1e-6, 0.99, 1e-5
sq_avg = [torch.zeros_like(p) for p in params]
head_samples = []
for step in range(4):
    ids, mask, labels = batch(B_SGLD)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss * N_DATA
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p, v in zip(params, sq_avg):
            g = p.grad
            v.mul_(ALPHA).addcmul_(g, g, value=1 - ALPHA)
            precond = 1.0 / (LAMBDA + v.sqrt())
            p.add_(-0.5 * LR * precond * g + torch.randn_like(p) * (LR * precond).sqrt())
    head_samples.append(model.classifier.weight.detach().clone())
print(f"psgld loss {loss.item() / N_DATA:.4f} head samples {len(head_samples)}")
report("psgld by hand checkpointing fp32")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
