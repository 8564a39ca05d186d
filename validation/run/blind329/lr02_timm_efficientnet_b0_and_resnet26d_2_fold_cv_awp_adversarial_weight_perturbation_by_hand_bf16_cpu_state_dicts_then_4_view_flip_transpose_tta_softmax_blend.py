"""A Kaggle image-classification notebook (leaf-disease style, 5 classes at 320 px): two timm
architectures (efficientnet_b0 with drop_path, resnet26d), 2-fold cross-validation each, a fresh model
per fold, bf16 autocast AdamW with a OneCycle schedule, and AWP by hand (adversarial weight
perturbation from the Kaggle kernels: after the first step, every weight is backed up, pushed along
its gradient scaled by its own norm, clamped to +-adv_eps * |w| via `param.data = torch.min(torch.max(...))`,
a second forward/backward, then restored); each fold's weights saved as a CPU state_dict and the model
deleted (no empty_cache). Then the four fold models are rebuilt one at a time for 4-view TTA (identity,
horizontal flip, vertical flip, transpose) under inference_mode and their softmaxes blended with
per-architecture weights.

Phases: 0 data; 1 efficientnet_b0 folds; 2 resnet26d folds; 3 TTA ensemble; 4 blend."""

import os

import timm
import torch
import torch.nn.functional as F

SMALL = bool(os.environ.get("SMOKE"))
torch.manual_seed(3292)
device = "cuda" if torch.cuda.is_available() else "cpu"
if SMALL:
    N_TRAIN, N_TEST, IMG, BS, STEPS = 16, 8, 64, 4, 2
else:
    N_TRAIN, N_TEST, IMG, BS, STEPS = 256, 64, 320, 32, 4
N_CLASSES, N_FOLDS, AWP_START = 5, 2, 1
ARCHS = {"efficientnet_b0": dict(drop_rate=0.3, drop_path_rate=0.2), "resnet26d": dict(drop_rate=0.2)}


def report(tag):
    if device == "cuda":
        print(
            f"{tag}: allocated {torch.cuda.memory_allocated()} peak {torch.cuda.max_memory_allocated()} "
            f"reserved {torch.cuda.memory_reserved()}"
        )
        torch.cuda.reset_peak_memory_stats()


class AWP:
    def __init__(self, model, optimizer, adv_param="weight", adv_lr=1.0, adv_eps=0.01):
        self.model, self.optimizer = model, optimizer
        self.adv_param, self.adv_lr, self.adv_eps = adv_param, adv_lr, adv_eps
        self.backup, self.backup_eps = {}, {}

    def save(self):
        for name, param in self.model.named_parameters():
            if param.requires_grad and param.grad is not None and self.adv_param in name:
                self.backup[name] = param.data.clone()
                grad_eps = self.adv_eps * param.abs().detach()
                self.backup_eps[name] = (self.backup[name] - grad_eps, self.backup[name] + grad_eps)

    def attack_step(self):
        e = 1e-6
        for name, param in self.model.named_parameters():
            if name in self.backup:
                norm1 = torch.norm(param.grad)
                norm2 = torch.norm(param.data.detach())
                r_at = self.adv_lr * param.grad / (norm1 + e) * (norm2 + e)
                param.data.add_(r_at)
                param.data = torch.min(
                    torch.max(param.data, self.backup_eps[name][0]), self.backup_eps[name][1]
                )

    def restore(self):
        for name, param in self.model.named_parameters():
            if name in self.backup:
                param.data = self.backup[name]
        self.backup, self.backup_eps = {}, {}

    def attack_backward(self, x, y):
        self.save()
        self.attack_step()
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            adv_loss = F.cross_entropy(self.model(x), y, label_smoothing=0.1)
        self.optimizer.zero_grad()
        adv_loss.backward()
        self.restore()


images = torch.randn(N_TRAIN, 3, IMG, IMG)
labels = torch.randint(0, N_CLASSES, (N_TRAIN,))
test_images = torch.randn(N_TEST, 3, IMG, IMG)
folds = torch.arange(N_TRAIN) % N_FOLDS
oof = torch.zeros(len(ARCHS), N_TRAIN, N_CLASSES, device=device)
saved = {}
report("data")

for a, (arch, kw) in enumerate(ARCHS.items()):
    for fold in range(N_FOLDS):
        tr_idx = (folds != fold).nonzero().squeeze(1)
        va_idx = (folds == fold).nonzero().squeeze(1)
        model = timm.create_model(arch, pretrained=False, num_classes=N_CLASSES, **kw).to(device)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=1e-2)
        sched = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=1e-3, total_steps=STEPS)
        awp = AWP(model, optimizer)
        model.train()
        for step in range(STEPS):
            b = tr_idx[step * BS : (step + 1) * BS]
            x, y = images[b].to(device, non_blocking=True), labels[b].to(device)
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y, label_smoothing=0.1)
            optimizer.zero_grad()
            loss.backward()
            if step >= AWP_START:
                awp.attack_backward(x, y)
            optimizer.step()
            sched.step()
        model.eval()
        with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
            for s in range(0, va_idx.numel(), BS * 2):
                vb = va_idx[s : s + BS * 2]
                oof[a, vb.to(device)] = model(images[vb].to(device)).float().softmax(-1)
        saved[(arch, fold)] = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        del model, optimizer, sched, awp
    report(arch)

tta_probs = torch.zeros(len(ARCHS), N_TEST, N_CLASSES, device=device)
for a, (arch, kw) in enumerate(ARCHS.items()):
    for fold in range(N_FOLDS):
        model = timm.create_model(arch, pretrained=False, num_classes=N_CLASSES, **kw)
        model.load_state_dict(saved[(arch, fold)])
        model.to(device).eval()
        with torch.inference_mode(), torch.autocast(device_type=device, dtype=torch.bfloat16):
            for s in range(0, N_TEST, BS):
                x = test_images[s : s + BS].to(device)
                views = [x, x.flip(3), x.flip(2), x.transpose(2, 3)]
                p = torch.stack([model(v).float().softmax(-1) for v in views]).mean(0)
                tta_probs[a, s : s + BS] += p / N_FOLDS
        del model
report("tta")

w = torch.tensor([0.6, 0.4], device=device).view(-1, 1, 1)
oof_blend = (oof * w).sum(0)
acc = (oof_blend.argmax(-1).cpu() == labels).float().mean()
final = (tta_probs * w).sum(0)
print(
    f"oof acc {acc.item():.3f} "
    f"test class counts {torch.bincount(final.argmax(-1), minlength=N_CLASSES).tolist()}"
)
report("blend")
