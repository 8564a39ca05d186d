"""HF transformers Seed-OSS (Llama-like with QKV biases, attention and residual dropout 0.1) built
from a config at 8 layers, 1,024 wide, 16 heads / 4 KV heads of 64, vocabulary 155,136, in bf16 with
gradient checkpointing, trained by SimPO (reference-free preference optimisation): each batch is 4
prompt/chosen/rejected triples whose lengths are drawn on the host, the 8 sequences (chosen then
rejected) right-padded to 640 with the pad id and labels -100 over prompt and padding, built on the
host and copied to the GPU; the length-averaged log-probabilities of the responses (log_softmax of
the fp32 logits gathered at the labels) give -logsigmoid(beta * (chosen - rejected) - gamma); AdamW,
3 steps; then a no_grad reward margin over 8 new pairs; 5 phases."""

import os
import random

import torch
import torch.nn.functional as F
from transformers import SeedOssConfig, SeedOssForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(10403)
rng = random.Random(10403)
if SMALL:
    cfg = SeedOssConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    P, S = 2, 48
else:
    cfg = SeedOssConfig(
        vocab_size=155136,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=8,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=4096,
    )
    P, S = 4, 640
BETA, GAMMA = 2.0, 0.5
PAD = cfg.pad_token_id
device = "cuda" if torch.cuda.is_available() else "cpu"


def pairs(n):
    ids, labels, mask = [], [], []
    rows = []
    for _ in range(n):
        prompt = [rng.randint(3, cfg.vocab_size - 1) for _ in range(rng.randint(S // 8, S // 2))]
        rows.append([prompt, rng.randint(S // 8, S - len(prompt))])
        rows[-1].append(rng.randint(S // 8, S - len(prompt)))
    for k in (1, 2):
        for prompt, *lens in rows:
            resp = [rng.randint(3, cfg.vocab_size - 1) for _ in range(lens[k - 1])]
            seq = prompt + resp
            pad = S - len(seq)
            ids.append(seq + [PAD] * pad)
            labels.append([-100] * len(prompt) + resp + [-100] * pad)
            mask.append([1] * len(seq) + [0] * pad)
    return [torch.tensor(t).to(device) for t in (ids, labels, mask)]


def avg_logp(model, ids, labels, mask):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    labels = labels[:, 1:]
    keep = labels != -100
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (logp * keep).sum(-1) / keep.sum(-1)


model = SeedOssForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-7, weight_decay=0.0)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()
model.train()
for step in range(3):
    ids, labels, mask = pairs(P)
    lp = avg_logp(model, ids, labels, mask)
    chosen, rejected = lp[:P], lp[P:]
    loss = -F.logsigmoid(BETA * (chosen - rejected) - GAMMA).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device == "cuda":
        print(
            f"step {step} loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
            f" reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    del lp, chosen, rejected, loss
model.eval()
with torch.no_grad():
    ids, labels, mask = pairs(2 * P)
    lp = avg_logp(model, ids, labels, mask)
    margin = (lp[: 2 * P] - lp[2 * P :]).mean()
if device == "cuda":
    print(
        f"eval {margin.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
