"""A LlamaForCausalLM built from a LlamaConfig (8 layers of 768, 12 heads, 4 KV heads, MLP 2,048,
vocabulary 32,000, SDPA attention; fp32 weights under bf16 autocast, AdamW), with the instrumentation a
user bolts on and then asks about on a forum because memory grows every step.

The mistakes: forward hooks on every decoder layer that append the layer's output to a dict of lists
"for activation statistics" (the outputs, not detached, stay alive with their graph nodes); the accuracy
computed later, "to avoid a sync", by lambdas appended to a list that bind each step's logits and labels
(`lambda logits=logits, y=y: ...`: every step's bf16 logits stay alive until the lambdas run); then the
sentence embeddings of a batch extracted with `output_hidden_states=True` outside `no_grad`, the mean of the
last hidden state appended to a list (each batch's whole forward graph, saved activations included, stays
alive: no backward ever frees it). The fixes: hooks that keep `output.detach().abs().mean()`, accuracy with
`.item()` in the step, the hooks removed and the embeddings taken from the base model (`model.model`) under
`torch.inference_mode()`.

Phases: 0 model and AdamW; 1 three leaky training steps (hooks, deferred lambdas; the lambdas run at the
end); 2 the lists cleared, the hooks replaced by detaching ones, three fixed steps; 3 embeddings of four
batches without no_grad; 4 the hooks removed, embeddings of four batches under inference_mode. 5 phases.
Batch 8 x 512 tokens. Seeded."""

import os
from collections import defaultdict

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3453)
device = "cuda" if torch.cuda.is_available() else "cpu"
cuda = device == "cuda"
if SMALL:
    V, D, L, H, KV, MLP, T, B, STEPS = 512, 64, 2, 4, 2, 128, 32, 2, 2
else:
    V, D, L, H, KV, MLP, T, B, STEPS = 32000, 768, 8, 12, 4, 2048, 512, 8, 3


def report(tag):
    if cuda:
        print(
            f"{tag}: max allocated {torch.cuda.max_memory_allocated()} "
            f"allocated {torch.cuda.memory_allocated()} "
            f"max reserved {torch.cuda.max_memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()
    else:
        print(f"{tag}: (cpu)")


def mem(tag):
    if cuda:
        print(f"  {tag}: allocated {torch.cuda.memory_allocated() / 2**20:.0f} MiB")


config = LlamaConfig(
    vocab_size=V,
    hidden_size=D,
    intermediate_size=MLP,
    num_hidden_layers=L,
    num_attention_heads=H,
    num_key_value_heads=KV,
    max_position_embeddings=2 * T,
    attn_implementation="sdpa",
)
model = LlamaForCausalLM(config).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=2e-4, weight_decay=0.01)
report("LlamaForCausalLM and AdamW")


def batch():
    ids = torch.randint(0, V, (B, T + 1), device=device)
    return ids[:, :-1], ids[:, 1:]


activations = defaultdict(list)


def keep_output(name):
    def hook(module, args, output):
        activations[name].append(output[0] if isinstance(output, tuple) else output)

    return hook


handles = [
    layer.register_forward_hook(keep_output(f"layer{i}")) for i, layer in enumerate(model.model.layers)
]
pending = []
model.train()
for step in range(STEPS):
    x, y = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(input_ids=x).logits
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    pending.append(lambda logits=logits, y=y: (logits.argmax(-1) == y).float().mean().item())
    mem(f"leaky step {step}, {sum(len(v) for v in activations.values())} stored outputs")
accs = [f() for f in pending]
print(f"deferred accuracies {[round(a, 4) for a in accs]}")
report("hooks keeping outputs, lambdas keeping logits")

pending.clear()
activations.clear()
del logits, loss
for h in handles:
    h.remove()


def keep_stat(name):
    def hook(module, args, output):
        out = output[0] if isinstance(output, tuple) else output
        activations[name].append(out.detach().abs().mean())

    return hook


handles = [layer.register_forward_hook(keep_stat(f"layer{i}")) for i, layer in enumerate(model.model.layers)]
for step in range(STEPS):
    x, y = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        logits = model(input_ids=x).logits
    loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    acc = (logits.argmax(-1) == y).float().mean().item()
    mem(f"fixed step {step}, accuracy {acc:.4f}")
del logits, loss
print({k: round(v[-1].item(), 4) for k, v in list(activations.items())[:2]})
report("detached hook statistics, accuracy per step")

model.eval()
embeddings = []
for i in range(4):
    x, _ = batch()
    with torch.autocast(device, dtype=torch.bfloat16):
        out = model(input_ids=x, output_hidden_states=True)
    embeddings.append(out.hidden_states[-1].mean(1))
    del out
    mem(f"embedding batch {i} without no_grad")
print(f"embeddings {tuple(torch.cat(embeddings).shape)}")
report("embeddings without no_grad")

embeddings.clear()
for h in handles:
    h.remove()
activations.clear()
with torch.inference_mode():
    for i in range(4):
        x, _ = batch()
        with torch.autocast(device, dtype=torch.bfloat16):
            hidden = model.model(input_ids=x).last_hidden_state
        embeddings.append(hidden.mean(1).float())
        mem(f"embedding batch {i} under inference_mode")
print(f"embeddings {tuple(torch.cat(embeddings).shape)}")
report("embeddings from the base model under inference_mode")
