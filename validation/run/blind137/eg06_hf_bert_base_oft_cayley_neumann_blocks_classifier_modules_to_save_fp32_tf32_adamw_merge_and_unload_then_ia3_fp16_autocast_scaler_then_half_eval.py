"""Two parameter-efficient stages on one Hugging Face BERT-base classifier (BertConfig: 768 wide,
12 layers, 30,522 vocabulary, 3 labels), as a user adapts it to a task, then to a domain: OFT
(orthogonal blocks of 32, the Cayley-Neumann form with 5 terms) on query, value and the attention
output dense, the classifier a modules_to_save copy, AdamW at batch 32 x 512 for 3 steps in fp32 with
TF32 matmuls; `merge_and_unload()` folds the rotations into the weights; then (IA)^3 on the merged
model (key, value and the FFN output's input scaled, `output.dense` its feed-forward module, the
classifier again saved) for 3 steps of AdamW (foreach) under fp16 autocast with GradScaler and
padded batches; then merged again, the model `.half()` and 1,024 sequences classified at batch 256
under inference_mode; 5 phases."""

import os

import torch
import torch.nn.functional as F
from peft import IA3Config, OFTConfig, get_peft_model
from transformers import BertConfig, BertForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13706)
torch.backends.cuda.matmul.allow_tf32 = True
B, T, N_EVAL, EB = (4, 32, 8, 4) if SMALL else (32, 512, 1024, 256)
config = BertConfig(
    vocab_size=30522 if not SMALL else 512,
    hidden_size=768 if not SMALL else 64,
    num_hidden_layers=12 if not SMALL else 2,
    num_attention_heads=12 if not SMALL else 4,
    intermediate_size=3072 if not SMALL else 128,
    max_position_embeddings=512,
    num_labels=3,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
model = BertForSequenceClassification(config).to(device)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def batch(n):
    ids = torch.randint(1000 if not SMALL else 10, config.vocab_size, (n, T), device=device)
    lengths = torch.randint(T // 2, T + 1, (n,), device=device)
    mask = (torch.arange(T, device=device)[None, :] < lengths[:, None]).long()
    ids = ids * mask
    return ids, mask, torch.randint(0, config.num_labels, (n,), device=device)


ocfg = OFTConfig(
    oft_block_size=32 if not SMALL else 16,
    r=0,
    target_modules=["query", "value", "attention.output.dense"],
    module_dropout=0.0,
    modules_to_save=["classifier"],
)
peft_model = get_peft_model(model, ocfg)
peft_model.train()
opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=2e-4)
for _ in range(3):
    ids, mask, y = batch(B)
    loss = F.cross_entropy(peft_model(input_ids=ids, attention_mask=mask).logits, y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(
        f"oft loss {loss.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss
model = peft_model.merge_and_unload()
del peft_model
if device == "cuda":
    print(
        f"merged allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

icfg = IA3Config(
    target_modules=["key", "value", "output.dense"],
    feedforward_modules=["output.dense"],
    modules_to_save=["classifier"],
)
peft_model = get_peft_model(model, icfg)
peft_model.train()
opt = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad], lr=3e-3, foreach=True)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
for _ in range(3):
    ids, mask, y = batch(B)
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        loss = F.cross_entropy(peft_model(input_ids=ids, attention_mask=mask).logits.float(), y)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
if device == "cuda":
    print(
        f"ia3 loss {loss.item():.4f}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss, scaler
model = peft_model.merge_and_unload().half().eval()
del peft_model
correct = 0
with torch.inference_mode():
    for _i in range(0, N_EVAL, EB):
        ids, mask, y = batch(EB)
        correct += int((model(input_ids=ids, attention_mask=mask).logits.argmax(-1) == y).sum())
if device == "cuda":
    print(
        f"eval correct {correct}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
