"""Model soups after Wortsman et al. 2022 ("Model soups: averaging weights of multiple fine-tuned
models improves accuracy without increasing inference time") and the mlfoundations/model-soups
repository, on an MNLI-shaped classifier: transformers' BertForSequenceClassification from a
BertConfig of BERT-base (12 layers of 768, 12 heads, 3,072, vocab 30,522, 3 labels, dropout 0.1),
its initial weights kept on the GPU as the "pre-trained" state_dict (detached clones). Three
ingredients are fine-tuned from it with a hyper-parameter grid (AdamW lr 2e-5, 3e-5, 5e-5, weight
decay 0.01, default foreach), each starting by load_state_dict(init) and a fresh optimizer, 3 steps
of batch 32 x 512 tokens under bf16 autocast with an attention mask that pads the last 64 tokens,
clipping at 1.0, and its state_dict copied to the CPU (v.detach().cpu()) as the repository saves
checkpoints. Then each ingredient is loaded back (load_state_dict from CPU tensors) and evaluated on 2
batches of 64 under no_grad and bf16 autocast; then the uniform soup as the repository writes it
({k: v * (1 / N) + soup[k]}) but on the GPU, loaded and evaluated in fp32 under inference_mode;
then WiSE-FT (Wortsman et al. 2022b) interpolations between the initial weights and the soup by
torch.lerp at alpha 0.5 and 0.8, each loaded and evaluated. Phases: the first ingredient's first
step; the rest of the fine-tunes; the per-ingredient evaluation; the uniform soup; WiSE-FT: 5
phases."""

import os

import torch
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(17804)
if SMALL:
    LAYERS, D, HEADS, FF, VOCAB, SEQ, PAD, B, STEPS, EVAL_N, EVAL_B = 2, 32, 2, 64, 500, 32, 4, 2, 2, 1, 2
else:
    LAYERS, D, HEADS, FF, VOCAB, SEQ, PAD, B, STEPS, EVAL_N, EVAL_B = (
        12,
        768,
        12,
        3072,
        30522,
        512,
        64,
        32,
        3,
        2,
        64,
    )
LRS = (2e-5, 3e-5, 5e-5)
NUM_LABELS = 3
device = "cuda" if torch.cuda.is_available() else "cpu"

config = BertConfig(
    vocab_size=VOCAB,
    hidden_size=D,
    num_hidden_layers=LAYERS,
    num_attention_heads=HEADS,
    intermediate_size=FF,
    max_position_embeddings=512,
    num_labels=NUM_LABELS,
)
model = BertForSequenceClassification(config).to(device)
init_sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
data_gen = torch.Generator().manual_seed(17804)
print(f"params {sum(p.numel() for p in model.parameters())} state {len(init_sd)}")
if device == "cuda":
    print(f"model + init {torch.cuda.memory_allocated()}")
    torch.cuda.reset_peak_memory_stats()


def make_batch(n):
    input_ids = torch.randint(0, VOCAB, (n, SEQ), generator=data_gen)
    attention_mask = torch.ones(n, SEQ, dtype=torch.long)
    attention_mask[:, SEQ - PAD :] = 0
    labels = torch.randint(0, NUM_LABELS, (n,), generator=data_gen)
    return input_ids.to(device), attention_mask.to(device), labels.to(device)


ingredients = []
for j, lr in enumerate(LRS):
    model.load_state_dict(init_sd)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    for step in range(STEPS):
        input_ids, attention_mask, labels = make_batch(B)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"ingredient {j} step {step} loss {out.loss.item():.4f}")
        if device == "cuda" and j == 0 and step == 0:
            print(
                f"first step peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
            )
            torch.cuda.reset_peak_memory_stats()
    ingredients.append({k: v.detach().cpu() for k, v in model.state_dict().items()})
    del optimizer, out, input_ids, attention_mask, labels
if device == "cuda":
    print(f"fine-tunes peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

eval_batches = [make_batch(EVAL_B) for _ in range(EVAL_N)]


def evaluate(name, autocast):
    model.eval()
    correct = 0
    ctx = torch.no_grad() if autocast else torch.inference_mode()
    with ctx, torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=autocast):
        for input_ids, attention_mask, labels in eval_batches:
            logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
            correct += (logits.argmax(-1) == labels).sum().item()
    print(f"{name} acc {correct / (EVAL_N * EVAL_B):.4f}")


for j, sd in enumerate(ingredients):
    model.load_state_dict(sd)
    evaluate(f"ingredient {j}", autocast=True)
if device == "cuda":
    print(
        f"ingredients eval peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

NUM_MODELS = len(ingredients)
for j, state_dict in enumerate(ingredients):
    if j == 0:
        uniform_soup = {k: v.to(device) * (1.0 / NUM_MODELS) for k, v in state_dict.items()}
    else:
        uniform_soup = {k: v.to(device) * (1.0 / NUM_MODELS) + uniform_soup[k] for k, v in state_dict.items()}
model.load_state_dict(uniform_soup)
evaluate("uniform soup", autocast=False)
if device == "cuda":
    print(f"soup peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()

for alpha in (0.5, 0.8):
    wise = {k: torch.lerp(init_sd[k], uniform_soup[k], alpha) for k in init_sd}
    model.load_state_dict(wise)
    evaluate(f"wise-ft {alpha}", autocast=False)
    del wise
if device == "cuda":
    print(f"wise-ft peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}")
