"""Eager-mode quantization-aware training with torch.ao.quantization over a Hugging Face DistilBERT
sequence classifier built from config (6 layers, 768 wide, 12 heads, FFN 3,072, 30,522-token
vocabulary, 2 labels; sdpa attention), as the "QAT for BERT" recipes (Intel Neural Compressor's and
the PyTorch static quantization tutorials' eager flow) write it: every nn.Linear wrapped in a
`QuantWrapper` (QuantStub, the Linear, DeQuantStub) and the qconfig set only on those wrappers
(embeddings and LayerNorm stay float), the attention projections and classifier
with `get_default_qat_qconfig("x86")` (FusedMovingAvgObsFakeQuantize: a per-tensor activation
observer of reduce_range, per-channel symmetric int8 weights, `torch.fused_moving_avg_obs_fake_quant`
on the GPU) and the FFN's lin1/lin2 with a hand-built QConfig of the unfused
`FakeQuantize.with_args(observer=MovingAverageMinMaxObserver, ...)` for activations and
`FakeQuantize.with_args(observer=MovingAveragePerChannelMinMaxObserver, ...)` for weights
(aminmax then `fake_quantize_per_{tensor,channel}_affine`); `prepare_qat(model, inplace=True)` swaps
in nnqat.Linear and hangs the activation fake-quants on forward hooks. fp32, SGD (lr 1e-3, momentum
0.9, weight decay 1e-4), batches of 32 x 256 tokens with a padding mask from fixed lengths. Phases:
the model built and prepared, the first QAT step, three more, then observers frozen with
`model.apply(torch.ao.quantization.disable_observer)` and two steps more, an evaluation under
no_grad with fake quantization on over 4 batches of 64, then the model moved to the CPU and
converted (`torch.ao.quantization.convert`) and one CPU batch scored; 6 phases."""

import os

import torch
import torch.nn as nn
from torch.ao.quantization import (
    FakeQuantize,
    MovingAverageMinMaxObserver,
    MovingAveragePerChannelMinMaxObserver,
    QConfig,
    QuantWrapper,
    convert,
    disable_observer,
    get_default_qat_qconfig,
    prepare_qat,
)
from transformers import DistilBertConfig, DistilBertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(16904)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    CFG = dict(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=128)
    B, L, STEPS, FROZEN_STEPS, EVAL_B, EVAL_N = 4, 32, 3, 1, 8, 2
else:
    CFG = dict(vocab_size=30522, dim=768, n_layers=6, n_heads=12, hidden_dim=3072)
    B, L, STEPS, FROZEN_STEPS, EVAL_B, EVAL_N = 32, 256, 4, 2, 64, 4

model = DistilBertForSequenceClassification(DistilBertConfig(num_labels=2, **CFG))
ffn_qconfig = QConfig(
    activation=FakeQuantize.with_args(
        observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255, reduce_range=True
    ),
    weight=FakeQuantize.with_args(
        observer=MovingAveragePerChannelMinMaxObserver,
        quant_min=-128,
        quant_max=127,
        dtype=torch.qint8,
        qscheme=torch.per_channel_symmetric,
    ),
)
default_qconfig = get_default_qat_qconfig("x86")
model.qconfig = None
linears = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.Linear)]
for name, module in linears:
    parent_name, _, child = name.rpartition(".")
    wrapped = QuantWrapper(module)
    wrapped.qconfig = ffn_qconfig if name.endswith(("ffn.lin1", "ffn.lin2")) else default_qconfig
    setattr(model.get_submodule(parent_name) if parent_name else model, child, wrapped)
del linears, module, wrapped
model.train()
prepare_qat(model, inplace=True)
model.to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, weight_decay=1e-4)
gen = torch.Generator().manual_seed(16904)
n_qat = sum(1 for m in model.modules() if hasattr(m, "weight_fake_quant"))
print(f"params {sum(p.numel() for p in model.parameters())} qat linears {n_qat}")
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n, dev=device):
    ids = torch.randint(5, CFG["vocab_size"], (n, L), generator=gen)
    lengths = torch.randint(L // 4, L + 1, (n,), generator=gen)
    mask = (torch.arange(L)[None, :] < lengths[:, None]).long()
    labels = torch.randint(0, 2, (n,), generator=gen)
    return (ids * mask).to(dev), mask.to(dev), labels.to(dev)


def train_step():
    ids, mask, labels = batch(B)
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


for step in range(STEPS):
    loss = train_step()
    print(f"qat step {step} loss {loss:.4f}")
    if device == "cuda" and step in (0, STEPS - 1):
        print(f"step {step} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
        torch.cuda.reset_peak_memory_stats()

model.apply(disable_observer)
for step in range(FROZEN_STEPS):
    loss = train_step()
    print(f"frozen-observer step {step} loss {loss:.4f}")
if device == "cuda":
    print(f"frozen peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

model.eval()
correct = 0
with torch.no_grad():
    for _ in range(EVAL_N):
        ids, mask, labels = batch(EVAL_B)
        correct += (model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == labels).sum().item()
print(f"fake-quant eval accuracy {correct / (EVAL_N * EVAL_B):.4f}")
if device == "cuda":
    print(f"eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

optimizer = None  # momentum buffers freed before the move to the CPU
model.to("cpu")
quantized = convert(model, inplace=False)
ids, mask, labels = batch(8, "cpu")
with torch.no_grad():
    logits = quantized(input_ids=ids, attention_mask=mask).logits
print(f"int8 model predictions {logits.argmax(-1).tolist()}")
if device == "cuda":
    print(
        f"converted allocated {torch.cuda.memory_allocated()}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
