"""A small multi-model inference server that keeps at most two models on the GPU: three fp16 models live on
the host with their parameters and buffers in pinned memory, a queue of requests names the model each needs,
and the server loads a model on demand (`model.to("cuda", non_blocking=True)`), evicts the least recently
used one when both slots are taken (`model.to("cpu")`, the host copies pinned again, then
`torch.cuda.empty_cache()`), and prefetches the next request's model on a side stream while the current
request runs (`torch.cuda.stream(copy_stream)`, then `current_stream().wait_stream(copy_stream)` before it
is used). No training; every generate fixes its length (min_new_tokens == max_new_tokens).

Models: a BertForSequenceClassification from BertConfig (base size, 3 labels, sdpa); torchvision's vit_l_16
(no weights, 1,000 classes); a GPT2LMHeadModel from GPT2Config (medium size: 1024 x 24 layers, 16 heads).
Requests, one phase each:
1. bert: 512 sentences of 128 tokens with padding masks in 2 batches, softmax probabilities to the host
   (vit prefetched meanwhile).
2. vit: 64 uint8 images (224 x 224) from a pinned host batch, copied non_blocking, normalised on the GPU
   and cast to fp16, top-5 classes to the host (gpt2 prefetched: bert evicted first).
3. gpt2: 8 left-padded prompts of 160 positions, greedy generate of 32 tokens, then the log-likelihood of the
   generated tokens by one teacher-forced forward (bert prefetched: vit evicted first).
4. bert: 1,024 sentences in 4 batches (no prefetch).
5. vit: 128 images in 2 batches (loaded on demand: gpt2 evicted first).

Phases: set-up on the host | bert | vit | gpt2 | bert | vit. 6 phases."""

import os
from collections import OrderedDict

import torch
from torchvision.models import vit_l_16
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(34105)
device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.float16 if device == "cuda" else torch.float32
if SMALL:
    BERT = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
    GPT = dict(n_embd=64, n_layer=2, n_head=2)
    SEQ, BERT_BATCH, IMG, VIT_BATCH, PROMPTS, PLEN, NEW = 16, 4, 224, 2, 2, 12, 4
    REQUESTS = [("bert", 8), ("vit", 2), ("gpt2", 2), ("bert", 16), ("vit", 4)]
else:
    BERT = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
    GPT = dict(n_embd=1024, n_layer=24, n_head=16)
    SEQ, BERT_BATCH, IMG, VIT_BATCH, PROMPTS, PLEN, NEW = 128, 256, 224, 64, 8, 160, 32
    REQUESTS = [("bert", 512), ("vit", 64), ("gpt2", 8), ("bert", 1024), ("vit", 128)]
SLOTS = 2


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated() / 1e9:.3f} GB, "
            f"allocated {torch.cuda.memory_allocated() / 1e9:.3f} GB, "
            f"reserved {torch.cuda.memory_reserved() / 1e9:.3f} GB"
        )
        torch.cuda.reset_peak_memory_stats()


def pin(model):
    if device == "cuda":
        for t in list(model.parameters()) + list(model.buffers()):
            t.data = t.data.pin_memory()
    return model


gpt_config = GPT2Config(vocab_size=50257, n_positions=1024, pad_token_id=50256, **GPT)
models = {
    "bert": BertForSequenceClassification(BertConfig(num_labels=3, **BERT)),
    "vit": vit_l_16(weights=None),
    "gpt2": GPT2LMHeadModel(gpt_config),
}
for m in models.values():
    pin(m.to(dtype).eval())
models["gpt2"].generation_config.pad_token_id = 50256
resident = OrderedDict()
copy_stream = torch.cuda.Stream() if device == "cuda" else None
images_host = torch.randint(
    0, 256, (max(n for k, n in REQUESTS if k == "vit"), 3, IMG, IMG), dtype=torch.uint8
)
if device == "cuda":
    images_host = images_host.pin_memory()
report("three fp16 models pinned on the host")


def evict_one(keep):
    name = next(n for n in resident if n != keep)
    resident.pop(name)
    pin(models[name].to("cpu"))
    if device == "cuda":
        torch.cuda.empty_cache()
    print("evicted", name)


def load(name, keep=None, side=False):
    if name in resident:
        resident.move_to_end(name)
        return
    if len(resident) >= SLOTS:
        evict_one(keep)
    if side and copy_stream is not None:
        with torch.cuda.stream(copy_stream):
            models[name].to(device, non_blocking=True)
    else:
        models[name].to(device, non_blocking=True)
    resident[name] = True
    print("loaded", name, "on the side stream" if side else "")


def ready(name):
    load(name)
    if copy_stream is not None:
        torch.cuda.current_stream().wait_stream(copy_stream)
    return models[name]


def serve_bert(n):
    model, probs = ready("bert"), []
    for _ in range(n // BERT_BATCH):
        ids = torch.randint(1000, 30522, (BERT_BATCH, SEQ), device=device)
        lens = torch.randint(SEQ // 4, SEQ + 1, (BERT_BATCH,), device=device)
        mask = (torch.arange(SEQ, device=device) < lens.unsqueeze(1)).long()
        probs.append(model(input_ids=ids * mask, attention_mask=mask).logits.float().softmax(-1).cpu())
    return torch.cat(probs)


def serve_vit(n):
    model, top = ready("vit"), []
    mean = torch.tensor([0.485, 0.456, 0.406], device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=device).view(1, 3, 1, 1) * 255
    for s in range(0, n, VIT_BATCH):
        x = images_host[s : s + VIT_BATCH].to(device, non_blocking=True)
        x = ((x.float() - mean) / std).to(dtype)
        top.append(model(x).float().topk(5, dim=1).indices.cpu())
    return torch.cat(top)


def serve_gpt2(n):
    model = ready("gpt2")
    ids = torch.randint(0, 50256, (n, PLEN), device=device)
    pads = torch.arange(n, device=device) * (PLEN // (2 * n))
    mask = (torch.arange(PLEN, device=device) >= pads.unsqueeze(1)).long()
    ids = ids * mask + 50256 * (1 - mask)
    out = model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW
    )
    full_mask = torch.cat([mask, torch.ones(n, NEW, dtype=mask.dtype, device=device)], 1)
    logits = model(input_ids=out, attention_mask=full_mask).logits[:, PLEN - 1 : -1].float()
    loglik = logits.log_softmax(-1).gather(-1, out[:, PLEN:, None]).squeeze(-1).sum(-1)
    return loglik.cpu()


serve = {"bert": serve_bert, "vit": serve_vit, "gpt2": serve_gpt2}
with torch.inference_mode():
    for i, (name, n) in enumerate(REQUESTS):
        load(name)
        nxt = REQUESTS[i + 1][0] if i + 1 < len(REQUESTS) else None
        if nxt is not None and nxt not in resident and i < 3:
            load(nxt, keep=name, side=True)
        result = serve[name](n)
        print(f"request {i} {name} x{n}", tuple(result.shape), "resident", list(resident))
        report(f"request {i} {name}")
