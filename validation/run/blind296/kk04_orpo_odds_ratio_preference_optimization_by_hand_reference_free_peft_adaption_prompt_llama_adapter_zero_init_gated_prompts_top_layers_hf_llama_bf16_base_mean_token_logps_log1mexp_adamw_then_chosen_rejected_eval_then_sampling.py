"""ORPO (odds-ratio preference optimisation, Hong et al. 2024) written by hand, reference-free, on a LLaMA
tuned with peft's adaption prompts (LLaMA-Adapter: learned prompt tokens with zero-initialised gates
in the top layers).

Model: a LlamaForCausalLM from LlamaConfig (16 layers of 1024, 16 heads, 8 key/value heads, SwiGLU
2816, vocabulary 32,000) in bf16; AdaptionPromptConfig(adapter_len 16, adapter_layers 8).
Each batch holds 4 prompts of 256 tokens, each with a chosen and a rejected response (random lengths up
to 512, right padded, one forward for the 8 rows); per-sequence mean token log-probabilities of the
response via log_softmax + gather; loss = NLL(chosen) - 0.1 * logsigmoid(log odds(chosen) - log
odds(rejected)), log odds(p) = logp - log1p(-exp(logp)); AdamW.
Phases: (1) build + first step; (2) three more steps; (3) inference_mode evaluation of chosen/rejected
log-probabilities and reward accuracy on 8 pairs; (4) sampling (top_k 50, temperature 0.7) of 64 tokens
after 96-token prompts at batch 8. 4 phases."""

import os

import torch
import torch.nn.functional as F
from peft import AdaptionPromptConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(29604)
if SMALL:
    cfg = LlamaConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    PAIRS, PROMPT, RESP_MIN, RESP_MAX, ADAPTER_LAYERS, GEN_PROMPT, NEW, GEN_B = 2, 16, 8, 32, 2, 16, 4, 2
else:
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        max_position_embeddings=4096,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    PAIRS, PROMPT, RESP_MIN, RESP_MAX, ADAPTER_LAYERS, GEN_PROMPT, NEW, GEN_B = 4, 256, 128, 512, 8, 96, 64, 8
LAMBDA = 0.1
device = "cuda" if torch.cuda.is_available() else "cpu"


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: peak allocated {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()} allocated {torch.cuda.memory_allocated()}"
        )
        torch.cuda.reset_peak_memory_stats()


def preference_batch(pairs):
    """Rows 0..pairs-1 chosen, pairs..2*pairs-1 rejected; response_mask marks the response tokens."""
    prompts = [torch.randint(3, cfg.vocab_size, (PROMPT,)) for _ in range(pairs)]
    seqs = []
    for _kind in ("chosen", "rejected"):
        for p in prompts:
            n = int(torch.randint(RESP_MIN, RESP_MAX, ()).item())
            seqs.append((p, torch.cat([torch.randint(3, cfg.vocab_size, (n - 1,)), torch.tensor([2])])))
    width = max(len(p) + len(r) for p, r in seqs)
    ids = torch.full((len(seqs), width), cfg.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    response = torch.zeros_like(ids, dtype=torch.bool)
    for i, (p, r) in enumerate(seqs):
        ids[i, : len(p) + len(r)] = torch.cat([p, r])
        mask[i, : len(p) + len(r)] = 1
        response[i, len(p) : len(p) + len(r)] = True
    return ids.to(device), mask.to(device), response.to(device)


def mean_response_logps(model, ids, mask, response):
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    logps = torch.log_softmax(logits.float(), dim=-1)
    tok = torch.gather(logps, 2, ids[:, 1:, None]).squeeze(2)
    m = response[:, 1:].float()
    return (tok * m).sum(1) / m.sum(1)


def orpo_loss(logp):
    chosen, rejected = logp.chunk(2)
    log_odds = (chosen - torch.log1p(-torch.exp(chosen))) - (rejected - torch.log1p(-torch.exp(rejected)))
    ratio = F.logsigmoid(log_odds)
    return -chosen.mean() - LAMBDA * ratio.mean(), ratio.mean()


base = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16)
model = get_peft_model(
    base, AdaptionPromptConfig(adapter_len=16, adapter_layers=ADAPTER_LAYERS, task_type="CAUSAL_LM")
)
model.print_trainable_parameters()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=9e-3, weight_decay=0.02)

model.train()
for step in range(4):
    ids, mask, response = preference_batch(PAIRS)
    logp = mean_response_logps(model, ids, mask, response)
    loss, ratio = orpo_loss(logp)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f} log odds ratio term {ratio.item():.4f}")
    if step == 0:
        report("build and first ORPO step")
report("ORPO steps")

model.eval()
with torch.inference_mode():
    ids, mask, response = preference_batch(2 * PAIRS)
    logp = mean_response_logps(model, ids, mask, response)
    chosen, rejected = logp.chunk(2)
    print(
        f"eval chosen {chosen.mean().item():.4f} rejected {rejected.mean().item():.4f} "
        f"accuracy {(chosen > rejected).float().mean().item():.2f}"
    )
report("chosen/rejected eval")

with torch.inference_mode():
    prompts = torch.randint(3, cfg.vocab_size, (GEN_B, GEN_PROMPT), device=device)
    gen = model.generate(
        input_ids=prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=True,
        top_k=50,
        temperature=0.7,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
    )
print(f"generated {tuple(gen.shape)}")
report("sampling")
if device == "cuda":
    print(f"final allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
