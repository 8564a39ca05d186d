"""torch.optim's own features on a Hugging Face Doge sequence classifier (DogeConfig: 1,024 wide,
12 layers, dynamic mask attention keeping 1,024 of 2,048 keys, 5 labels; fp32 weights under bf16
autocast): AdamW on the for-loop path (foreach=False) over three parameter groups (decayed
matrices, norms and biases without decay, the embedding at a lower rate), warm-up by LinearLR then
cosine in a SequentialLR, 2 micro-batches of 8 x 2,048 accumulated per step with
zero_grad(set_to_none=False); after 2 steps the optimizer's and scheduler's state_dict() go to
the CPU through torch.save/torch.load, the optimizer is rebuilt fused (fused=True) and loaded back
(its step counters move to the GPU) for 1 step, then once more as capturable AdamW with a tensor
learning rate for 1 step; evaluation under inference_mode; 6 phases."""

import io
import os

import torch
import torch.nn.functional as F
from transformers import DogeConfig, DogeForSequenceClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13205)
B, T = (2, 64) if SMALL else (8, 2048)
cfg = DogeConfig(
    vocab_size=32768 if not SMALL else 1024,
    hidden_size=1024 if not SMALL else 128,
    intermediate_size=2048 if not SMALL else 256,
    num_hidden_layers=12 if not SMALL else 2,
    num_attention_heads=8 if not SMALL else 2,
    num_key_value_heads=8 if not SMALL else 2,
    keep_window_size=1024 if not SMALL else 32,
    max_position_embeddings=T,
    num_labels=5,
    pad_token_id=0,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"

model = DogeForSequenceClassification(cfg).to(device)
model.train()
emb = [p for n, p in model.named_parameters() if "embed_tokens" in n]
decay = [p for n, p in model.named_parameters() if "embed_tokens" not in n and p.ndim >= 2]
no_decay = [p for n, p in model.named_parameters() if "embed_tokens" not in n and p.ndim < 2]


def groups(lr=3e-4):
    return [
        {"params": decay, "weight_decay": 0.1},
        {"params": no_decay, "weight_decay": 0.0},
        {"params": emb, "weight_decay": 0.0, "lr": lr / 3},
    ]


def scheduler(opt):
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.01, total_iters=10)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=990, eta_min=3e-5)
    return torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[10])


opt = torch.optim.AdamW(groups(), lr=3e-4, betas=(0.9, 0.95), foreach=False)
sched = scheduler(opt)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train_step(step, tag):
    for _ in range(2):
        x = torch.randint(1, cfg.vocab_size, (B, T), device=device)
        mask = torch.ones(B, T, dtype=torch.long, device=device)
        mask[: B // 2, -T // 4 :] = 0
        y = torch.randint(0, 5, (B,), device=device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            logits = model(input_ids=x, attention_mask=mask).logits
        loss = F.cross_entropy(logits.float(), y) / 2
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    opt.zero_grad(set_to_none=False)
    if device == "cuda":
        print(
            f"{tag} step {step} loss {loss.item():.4f} lr {sched.get_last_lr()[0]:.2e}"
            f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


for step in range(2):
    train_step(step, "forloop")


def roundtrip(**kw):
    global opt, sched
    buf = io.BytesIO()
    torch.save({"opt": opt.state_dict(), "sched": sched.state_dict()}, buf)
    buf.seek(0)
    del opt, sched
    sd = torch.load(buf, map_location="cpu")
    opt = torch.optim.AdamW(groups(), betas=(0.9, 0.95), **kw)
    opt.load_state_dict(sd["opt"])
    sched = scheduler(opt)
    sched.load_state_dict(sd["sched"])


roundtrip(lr=3e-4, fused=True)
train_step(2, "fused")
roundtrip(lr=torch.tensor(3e-4, device=device), capturable=True, foreach=True)
train_step(3, "capturable")

model.eval()
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
    x = torch.randint(1, cfg.vocab_size, (2 * B, T), device=device)
    pred = model(input_ids=x).logits.argmax(-1)
if device == "cuda":
    print(
        f"eval {tuple(pred.shape)} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
