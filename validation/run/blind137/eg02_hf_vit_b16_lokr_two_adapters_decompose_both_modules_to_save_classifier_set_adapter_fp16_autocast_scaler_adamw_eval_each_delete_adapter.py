"""Two LoKr adapters on one Hugging Face ViT-B/16 (ViTConfig: 224 x 224, 768 wide, 12 layers, 200
labels) for image classification, switched by name: "coarse" (LoKr rank 8 on q_proj/v_proj, the
classifier a modules_to_save copy) trained 3 steps, then "fine" added by `add_adapter` (rank 16,
decompose_both, on q/k/v_proj and the MLP's fc1/fc2, its own classifier copy), made
active by `set_adapter` and trained 3 steps with a fresh AdamW; fp16 autocast with GradScaler and
gradient clipping at 1.0, batch 96; then each adapter in turn evaluated on 384 images at batch 128
under inference_mode, and "coarse" removed by `delete_adapter`; 5 phases."""

import os

import torch
import torch.nn.functional as F
from peft import LoKrConfig, get_peft_model
from transformers import ViTConfig, ViTForImageClassification

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(13702)
B, IMG, N_EVAL, EB = (4, 32, 8, 4) if SMALL else (96, 224, 384, 128)
config = ViTConfig(
    image_size=IMG,
    patch_size=16,
    hidden_size=768 if not SMALL else 64,
    num_hidden_layers=12 if not SMALL else 2,
    num_attention_heads=12 if not SMALL else 4,
    intermediate_size=3072 if not SMALL else 128,
    num_labels=200,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
device = "cuda" if torch.cuda.is_available() else "cpu"
amp = device == "cuda"
coarse = LoKrConfig(r=8, alpha=8, target_modules=["q_proj", "v_proj"], modules_to_save=["classifier"])
fine = LoKrConfig(
    r=16,
    alpha=16,
    decompose_both=True,
    rank_dropout=0.05,
    target_modules=["q_proj", "k_proj", "v_proj", "fc1", "fc2"],
    modules_to_save=["classifier"],
)
model = get_peft_model(ViTForImageClassification(config), coarse, adapter_name="coarse").to(device)
scaler = torch.amp.GradScaler("cuda", enabled=amp)
if device == "cuda":
    print(f"model {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}")
    torch.cuda.reset_peak_memory_stats()


def train(opt, steps):
    model.train()
    for _ in range(steps):
        x = torch.randn(B, 3, IMG, IMG, device=device)
        y = torch.randint(0, config.num_labels, (B,), device=device)
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = F.cross_entropy(model(pixel_values=x).logits, y, label_smoothing=0.1)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
        scaler.step(opt)
        scaler.update()
    return loss


opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.05)
loss = train(opt, 3)
if device == "cuda":
    print(
        f"coarse loss {loss.item():.4f} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss
model.add_adapter("fine", fine)
model.set_adapter("fine")
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4, weight_decay=0.05)
loss = train(opt, 3)
if device == "cuda":
    print(
        f"fine loss {loss.item():.4f}"
        f" trainable {sum(p.numel() for p in model.parameters() if p.requires_grad)}"
        f" peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

del opt, loss
model.eval()
agree = 0
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.float16, enabled=amp):
    for _i in range(0, N_EVAL, EB):
        x = torch.randn(EB, 3, IMG, IMG, device=device)
        preds = []
        for name in ("coarse", "fine"):
            model.set_adapter(name)
            preds.append(model(pixel_values=x).logits.float().softmax(-1))
        agree += int((preds[0].argmax(-1) == preds[1].argmax(-1)).sum())
if device == "cuda":
    print(
        f"eval agree {agree} peak {torch.cuda.max_memory_allocated()} reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()

model.set_adapter("fine")
model.delete_adapter("coarse")
del preds, x
if device == "cuda":
    print(
        f"deleted allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()}"
        f" reserved {torch.cuda.memory_reserved()}"
    )
