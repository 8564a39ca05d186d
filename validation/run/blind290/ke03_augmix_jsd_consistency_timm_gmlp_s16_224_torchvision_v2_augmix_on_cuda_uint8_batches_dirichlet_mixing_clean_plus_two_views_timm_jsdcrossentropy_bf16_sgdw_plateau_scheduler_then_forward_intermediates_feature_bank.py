"""AugMix (Hendrycks et al. 2020) robustness training with the Jensen-Shannon consistency loss, as timm's
training script runs it with `--aug-splits 3 --jsd-loss`, on timm 1.0.29's `gmlp_s16_224` (gMLP-S, spatial
gating units, 100 classes, drop_path 0.05). Images are uint8 batches of 3 x 224 x 224 made on the GPU; each
step's 64 images give three splits: the clean batch and two AugMix views from
`torchvision.transforms.v2.AugMix(severity=3, mixture_width=3)` run on CUDA over groups of 16 images (one op
chain a group, Dirichlet mixing weights per image), all three through `ToDtype(float32, scale=True)` and
`Normalize`, concatenated to 192 images. timm's `JsdCrossEntropy(num_splits=3, smoothing=0.1)`: the
label-smoothed cross-entropy of the clean split plus 12 x the JS divergence of the three splits' softmaxes.
Phase 1: building the model and timm's `SGDW` (`create_optimizer_v2(model, "sgdw", momentum=0.9,
nesterov=True, weight_decay=5e-4)`) with `PlateauLRScheduler` (mode min, patience 1). Phase 2: 2 epochs of 4
steps under bf16 autocast, each epoch closed by a no_grad validation loss over 2 batches of 128 that steps
the plateau scheduler. Phase 3: a linear-probe feature bank: `model.forward_intermediates(x, indices=[7, 15,
23, 29], intermediates_only=True)` under `torch.inference_mode()` and bf16 autocast on 6 batches of 128
clean images, each block's tokens mean-pooled and the features kept on the GPU, then concatenated.
3 phases."""

import timm
import torch
from timm.loss import JsdCrossEntropy
from timm.optim import create_optimizer_v2
from timm.scheduler import PlateauLRScheduler
from torchvision.transforms import v2

torch.manual_seed(2903)
dev = "cuda"
B, NUM_CLASSES = 64, 100


def report(tag):
    print(
        f"{tag}: peak {torch.cuda.max_memory_allocated()} alloc {torch.cuda.memory_allocated()} "
        f"reserved {torch.cuda.memory_reserved()}"
    )
    torch.cuda.reset_peak_memory_stats()


model = timm.create_model("gmlp_s16_224", pretrained=False, num_classes=NUM_CLASSES, drop_path_rate=0.05).to(
    dev
)
optimizer = create_optimizer_v2(model, "sgdw", lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
scheduler = PlateauLRScheduler(optimizer, decay_rate=0.5, patience_t=1, mode="min", warmup_t=0)
criterion = JsdCrossEntropy(num_splits=3, smoothing=0.1)
augmix = v2.AugMix(severity=3, mixture_width=3)
to_input = v2.Compose(
    [v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.5071, 0.4865, 0.4409], [0.2673, 0.2564, 0.2762])]
)
report("gmlp_s16_build_sgdw_plateau")


def images(n):
    return torch.randint(0, 256, (n, 3, 224, 224), dtype=torch.uint8, device=dev)


for epoch in range(2):
    model.train()
    for _step in range(4):
        clean = images(B)
        target = torch.randint(0, NUM_CLASSES, (B,), device=dev)
        views = [clean]
        for _split in range(2):
            views.append(torch.cat([augmix(clean[i : i + 16]) for i in range(0, B, 16)]))
        x = torch.cat([to_input(v) for v in views])
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(x)
            loss = criterion(logits, target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    model.eval()
    val = 0.0
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _b in range(2):
            out = model(to_input(images(128)))
            val += torch.nn.functional.cross_entropy(
                out.float(), torch.randint(0, NUM_CLASSES, (128,), device=dev)
            ).item()
    scheduler.step(epoch + 1, val / 2)
    print("epoch", epoch, round(loss.item(), 3), round(val / 2, 3), optimizer.param_groups[0]["lr"])
report("gmlp_augmix_jsd_train_bf16")

del clean, views, x, logits, loss, out
bank = []
with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16):
    for _b in range(6):
        feats = model.forward_intermediates(
            to_input(images(128)), indices=[7, 15, 23, 29], intermediates_only=True
        )
        bank.append(torch.cat([f.float().mean((2, 3)) for f in feats], 1))
bank = torch.cat(bank)
print("bank", tuple(bank.shape), round(bank.norm(dim=1).mean().item(), 3))
report("gmlp_forward_intermediates_feature_bank")
