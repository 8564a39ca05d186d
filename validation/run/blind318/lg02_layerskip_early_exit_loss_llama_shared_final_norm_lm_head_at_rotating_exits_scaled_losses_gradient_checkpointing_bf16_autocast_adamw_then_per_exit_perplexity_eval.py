"""LayerSkip-style training (Elhoushi et al. 2024) of a LlamaForCausalLM from a small LlamaConfig (1536 wide,
12 layers, GQA 12/4, untied), written by hand around the HF model: the forward asks for
output_hidden_states, and besides the usual last-layer loss, the hidden states of the "active" early exits
go through the model's own final RMSNorm and lm_head and get a cross-entropy of their own. Which exits are
active rotates with the step (rotational curriculum: every 3rd layer, offset by step % 3), each exit's
loss is scaled by e_l = sum_{i<=l} i / sum_i i and the total is normalised. Gradient checkpointing on the
decoder layers (use_reentrant=False), bf16 base weights and bf16 autocast, AdamW on all weights
(foreach), 4 steps on 4 x 1,024 tokens. Then, under inference_mode, a per-exit evaluation: each exit
layer's perplexity on two held-out batches, computed from the stacked hidden states one exit at a time.

Phases: 0 model built; 1 first step; 2 three more steps; 3 per-exit perplexity eval."""

import os

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3182)
if SMALL:
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    B, S, EVB = 2, 32, 2
else:
    config = LlamaConfig(
        vocab_size=32000,
        hidden_size=1536,
        intermediate_size=4096,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        max_position_embeddings=2048,
    )
    B, S, EVB = 4, 1024, 4
config.tie_word_embeddings = False
config.pad_token_id, config.bos_token_id, config.eos_token_id = 0, 1, 2
config._attn_implementation = "sdpa"
device = "cuda" if torch.cuda.is_available() else "cpu"
L = config.num_hidden_layers


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


model = LlamaForCausalLM(config).to(device=device, dtype=torch.bfloat16)
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.config.use_cache = False
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, foreach=True)
scale_den = sum(range(1, L + 1))
report("built")


def exit_logits(h):
    return model.lm_head(model.model.norm(h))


def shifted_ce(logits, labels):
    return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())


model.train()
for step in range(4):
    ids = torch.randint(3, config.vocab_size, (B, S), device=device)
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        out = model(input_ids=ids, output_hidden_states=True)
        # hidden_states[0]: the embeddings; hidden_states[l]: layer l's output (the last one normed)
        total = shifted_ce(out.logits, ids)
        weight_sum = 1.0
        for layer in range(1 + step % 3, L, 3):
            e = sum(range(1, layer + 1)) / scale_den
            total = total + e * shifted_ce(exit_logits(out.hidden_states[layer]), ids)
            weight_sum += e
        loss = total / weight_sum
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    print(f"step {step} loss {loss.item():.4f}")
    del out, total, loss
    if step == 0:
        report("step0")
report("steps1-3")

model.eval()
nll = torch.zeros(L, device=device)
with torch.inference_mode():
    for _ in range(2):
        ids = torch.randint(3, config.vocab_size, (EVB, S), device=device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
            for layer in range(1, L):
                nll[layer - 1] += shifted_ce(exit_logits(hs[layer]), ids)
            nll[L - 1] += shifted_ce(model.lm_head(hs[L]), ids)
        del hs
ppl = torch.exp(nll / 2)
print("exit ppl", [round(v, 1) for v in ppl.tolist()])
report("exit-eval")
